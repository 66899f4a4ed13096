"""What a `CorgiPileDataset` reads: one pack (`OnePack`), or a weighted blend of packs (`PackBlend`).

Both give the dataset the same few things: the pure planner of an epoch, the fingerprint that a
resume state must match, this process's reader (a `PieceReader`; for a blend a `BlendReader` over
one per source), the readers whose remote caches learn the known future, how a planned piece maps
to (source, piece of that source's pack), and where a sample lies (for error messages).  Storages
and caches are opened once per process: DataLoader workers each open their own.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import warnings

from corgi_io.errors import ArgumentError
from corgi_io.manifest import open_manifest
from corgi_io.manifest.fields import KIND_OF_FIELD
from corgi_io.reading import PieceReader
from corgi_io.reading.blend_reader import BlendReader
from corgi_io.reading.field_reads import wanted_fields
from corgi_io.reading.buffers import BufferPool
from corgi_io.schedule import block_owners, pack_fingerprint
from corgi_io.schedule.blend import check_weights
from corgi_io.schedule.blend_plan import blend_planner
from corgi_io.storage import open_storage
from corgi_io.timing.clock import NULL_CLOCK

from corgi_io.loaders.piece_cache import RemoteCache
from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.loader_spec import block_table


class OnePack:
    """One pack: its manifest, the block owners under `partitions`, this process's storage and remote cache, and
    the fields it reads alone (`Reading(fields=)`: None for every field; checked against the pack here)."""

    def __init__(self, source, spec):
        self.spec, self.manifest = spec, open_manifest(source, spec.storage_options)
        m = self.manifest
        self.fields = wanted_fields(m, spec.fields)
        if self.fields is not None and spec.cache_dir is not None:
            warnings.warn(f"{m.root}: Reading(fields={self.fields!r}) reads past the Cache (field-only reads fetch "
                          "a few percent of each piece and are not cached); fields=None caches whole pieces",
                          stacklevel=4)
        self.block_owner = None if spec.partitions is None else \
            block_owners(spec.partitions, [shard.path for shard in m.shards], m.blocks.shard)
        self._storage, self._storage_pid = None, None
        self._cache = RemoteCache(spec)
        self._pool = None  # this process's read buffers, reused over its epochs (`BufferPool`)

    def __getstate__(self):
        return {**self.__dict__, "_storage": None, "_storage_pid": None, "_pool": None}

    @property
    def storage(self):
        """This process's Storage of the pack."""
        if self._storage_pid != os.getpid():  # None in a new copy, another pid in a forked worker
            self._storage = open_storage(self.manifest.root, **self.spec.storage_options)
            self._storage_pid = os.getpid()
            self._pool = BufferPool()
        return self._storage

    @functools.cached_property
    def fingerprint(self) -> str:
        """What identifies the pack's samples (`pack_fingerprint`), once: it costs O(shards)."""
        m = self.manifest
        return pack_fingerprint(m.format, m.checksum, m.options, m.shards)

    def planner(self, world_size: int, epoch: int, cost_model=None):
        """The pure `EpochPlanner` of `epoch` for `world_size` ranks."""
        return self.spec.planner(self.manifest, world_size, epoch, cost_model, self.block_owner)

    def reader(self, planner=None, clock=NULL_CLOCK) -> PieceReader:
        """A reader of this process's storage (through its remote cache, with `cache_dir`, unless it reads some
        fields alone), for any planner's plans, timing its stages on `clock`."""
        spec = self.spec
        cache = None if self.fields is not None else self._cache.for_reading(self.manifest, self.storage,
                                                                              self.fingerprint)
        return PieceReader(self.manifest, self.storage, spec.prefetch_blocks, spec.read_threads,
                           verify=spec.verify_reads, cache=cache, pool=self._pool, clock=clock, fields=self.fields)

    def piece_readers(self, reader) -> list:
        """The PieceReaders inside `reader`, by source: itself."""
        return [reader]

    def expect(self, planner, rank: int, worker: int, num_workers: int) -> None:
        """Tell the manifest the blocks one worker's plan reads, in order: a remote pack then fetches their rows a
        few requests at a time instead of one per block (`Manifest.expect_blocks`).  A pack without row groups (local,
        or before version 5) has nothing to be told: its worker's pieces are not worked out twice."""
        if self.manifest.row_groups is None:
            return
        pieces = planner.worker_pieces(rank, worker, num_workers)
        self.manifest.expect_blocks(pieces[:, 0] if len(pieces) else pieces)
        folder = self._cache.rows_folder(self.fingerprint)
        if folder is not None:  # the node's ranks fetch each group once
            self.manifest.share_rows(folder)

    @staticmethod
    def local(planner):
        """Piece -> (source, piece of its pack) for `planner`'s plans: a pack's pieces are its own."""
        return lambda piece: (0, tuple(piece))

    def locate(self, sample: dict) -> tuple:
        """(shard URL, shard path, byte offset of its `data`) of a sample read from this pack: its primary field's,
        or, read by `fields` without it, the field that `data` holds."""
        m, index = self.manifest, sample["index"]
        path, offset = m.shards[int(m.samples.shard[index])].path, int(m.samples.data_offset[index])
        if self.fields is not None and sample["ext"] in sample.get("fields", ()) and \
                sample["ext"] != m.extensions[int(m.samples.ext[index])]:
            offset = int(m.field_ranges(index, index + 1, [sample["ext"]]).offset[0])
        return self.storage.url(path), path, offset

    def kinds(self) -> tuple:
        """What a sample of the pack holds, for the batching check of a blend: its fields (sorted: the order they
        were asked in, or stored in, is no difference), or its media kinds."""
        m = self.manifest
        if self.fields is not None:
            return ("fields", *sorted(self.fields))
        if m.max_fields > 1:
            return ("fields", *sorted(m.fields))
        return tuple(sorted({KIND_OF_FIELD.get(ext, ext) for ext in m.extensions}))


class PackBlend:
    """Several packs read with weights (a `Blend`): each source a `OnePack`."""

    def __init__(self, blend, spec):
        sources, weights = blend.sources, blend.weights
        names = [str(name) for name in sources]
        self.spec, self.names = spec, names
        self.packs = [OnePack(path, spec) for path in sources.values()]
        clashing = [name for name, pack in zip(names, self.packs) if "source" in (pack.manifest.fields or ())]
        if clashing:  # packs made before `source` was reserved at pack time (issue 28)
            raise ArgumentError(f"the blend's sources {clashing} have a field named 'source', which a blend sets "
                                "on every sample to its source's name: re-pack them with that field renamed")
        sizes = [pack.manifest.num_samples for pack in self.packs]
        self.weights = check_weights(names, sizes if weights is None else weights)
        empty = [name for name, size, w in zip(names, sizes, self.weights) if w > 0 and size == 0]
        if empty:
            raise ArgumentError(f"the blend's sources {empty} have weights but no samples")
        self.samples_per_epoch = epoch_length(blend.samples_per_epoch, names, self.weights, sizes)

    @functools.cached_property
    def fingerprint(self) -> str:
        """What identifies the blend: each source's name and pack, the weights and the epoch length."""
        text = json.dumps([[[name, pack.fingerprint] for name, pack in zip(self.names, self.packs)],
                           self.weights.tolist(), self.samples_per_epoch])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def planner(self, world_size: int, epoch: int, cost_model=None):
        """The pure `BlendPlanner` of `epoch` for `world_size` ranks."""
        return blend_planner([block_table(pack.manifest) for pack in self.packs], self.weights,
                             self.samples_per_epoch, world_size, epoch, cost_model=cost_model,
                             **self.spec.plan_options)

    def reader(self, planner, clock=NULL_CLOCK) -> BlendReader:
        """A reader of `planner`'s virtual pieces, through each source's reader, timing its stages on `clock`."""
        return BlendReader([pack.reader(clock=clock) for pack in self.packs], self.names, planner.blend,
                           self.spec.prefetch_blocks)

    def piece_readers(self, reader) -> list:
        """The PieceReaders inside `reader`, by source."""
        return reader.readers

    def expect(self, planner, rank: int, worker: int, num_workers: int) -> None:
        """Nothing yet: a blend's sources fetch their rows as their blocks are first used (a request per block
        on a remote version-5 pack; mapping virtual pieces to each source's blocks is not done)."""

    @staticmethod
    def local(planner):
        """Virtual piece -> (source, piece of its pack) for `planner`'s plans."""
        return planner.blend.local_piece

    def locate(self, sample: dict) -> tuple:
        """(shard URL, shard path, payload byte offset) of a sample, in the pack of its source."""
        return self.packs[self.names.index(sample["source"])].locate(sample)

    def check_batchable(self, decode, batch_size, collate_fn) -> None:
        """ArgumentError, before any read, when the default collate would meet samples it cannot stack together:
        decoded batches of sources that hold different kinds of samples (or different fields)."""
        if decode is None or batch_size is None or collate_fn is not collate_samples:
            return
        kinds = {name: pack.kinds() for name, pack in zip(self.names, self.packs)}
        if len(set(kinds.values())) > 1:
            held = ", ".join(f"{name}: {'/'.join(k)}" for name, k in kinds.items())
            raise ArgumentError(f"the blend's sources hold different kinds of samples ({held}): decoded, they cannot "
                                "be batched together by the default collate_fn; pass Batches(B, collate_fn=...) "
                                "that can, or read samples (batching=None)")


def epoch_length(samples_per_epoch, names: list, weights, sizes: list) -> int:
    """A blend's samples per epoch (`Blend.samples_per_epoch`, checked when made): an int as given; a source's
    name: one pass over that source (its samples over its weight); None: all the sources' samples together."""
    if samples_per_epoch is None:
        return int(sum(sizes))
    if isinstance(samples_per_epoch, str):
        s = names.index(samples_per_epoch)
        if weights[s] == 0:
            raise ArgumentError(f"samples_per_epoch={samples_per_epoch!r} names a source of weight 0")
        return max(1, math.ceil(sizes[s] / weights[s] - 1e-9))
    return samples_per_epoch

"""CorgiPileDataset: a torch IterableDataset that streams a corgi pack with two-level shuffling.

Per epoch: the planning core (`corgi_io.schedule`) orders the blocks, gives every rank
the same number of samples, splits a rank's share among DataLoader workers, and groups
each worker's pieces into shuffle buffers.  `PieceReader` then reads each piece with one
ranged read, ahead of the consumer, and the samples come out in the plan's order.  The
dataset holds its checked options (`spec`, frozen) and the epoch's `Planner` (`corgi_io.schedule.planner`).
"""
from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Mapping
from dataclasses import fields, replace
from operator import attrgetter

import torch

from corgi_io.errors import ArgumentError, ResumeError
from corgi_io.schedule import find_states, merge_states

from corgi_io.loaders.piece_cache import cached_epoch
from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.decode import DEFAULT_MAX_PIXELS, epoch_decoder, get_decoder
from corgi_io.loaders.distributed import StepLog, rank_and_world, worker_and_count
from corgi_io.loaders.fast_batches import fast_batches_apply, row_batch, shared_buffer
from corgi_io.loaders.image_decoder import batch_slots
from corgi_io.loaders.on_error import SamplePreparer, collated_batches
from corgi_io.loaders.options import LoaderSpec, block_table, check_options
from corgi_io.loaders.packs import OnePack, PackBlend
from corgi_io.loaders.resume_point import ResumePoint
from corgi_io.loaders.token_rows import check_token_pack, row_items, row_spec
from corgi_io.loaders.shared_epoch import SharedEpoch


class CorgiPileDataset(torch.utils.data.IterableDataset):
    """Samples of a pack as dicts ``{"index", "key", "label", "size", "kind", "ext", "data"}``, CorgiPile-shuffled.

    `shuffle`: "corgipile" (block order + buffer shuffle), "block" (block order only), "window" (the
    tf.data/webdataset baseline: a sliding buffer of as many samples as `buffer_blocks` blocks, over the stored
    order), "none" (stored order), or "full" (one read per sample).  `buffer_blocks` pieces form one shuffle buffer;
    `prefetch_blocks` more are read ahead.  `decode`: None (bytes), "pil", "rgb", "text", "video" (8-frame clips),
    "auto" (by each sample's kind), or a callable(data, sample) such as `VideoDecoder(frames=16, clip="random")`
    (`corgi_io.loaders.decode`); `transform` then maps the decoded data.  Images (clips: frames x H x W) above
    `max_pixels` (Pillow's limit by default), and samples of another kind than a built-in decoder's, are refused
    before decoding.  A decode failure is a DecodeError naming the shard, byte offset and key: `on_error="raise"`
    (default) raises it, "skip" (needs `batch_size`) drops the sample with a warning, its batch one sample shorter,
    and raises only for a batch whose every sample fails (`corgi_io.loaders.on_error`).  `verify_reads` (on by
    default) checks each shard's size on its first read and every record's checksum: a mismatch raises
    CorruptDataError naming the shard, byte offset and key, before that sample is yielded.

    `balance`: "count" (equal samples), "size" (equal samples and size sums), or "dynamic" (equal samples, size
    budgets proportional to each rank's measured speed: report steps with `observe`; ranks exchange their fits at
    `set_epoch`).  "size" and "dynamic" balance every step's batch (an epoch balanced only in its sums steps slower
    than count balance), so they need `batch_size` (and shuffle "corgipile").  `partitions` maps rank -> shard paths
    so a rank reads only its own shards (node-local data); counts stay equal.

    With `batch_size=B` the dataset yields whole batches, each `collate_fn(samples)` (default `collate_samples`:
    equal-shape arrays stacked, so decode to a fixed size with a resize `transform`; raw bytes cross the worker
    queue as one `PackedBytes` buffer; with raw bytes, no transform, the default collate and one field per sample,
    `fast_batches` is on: each batch is gathered from the read pieces with numpy, no dict per sample, the same
    batch field for field), size-balanced inside each buffer under "corgipile" (or, with `group_by_size=True`
    and balance "count", length-grouped: each buffer sorted by size and cut, the batches shuffled, so padded
    models pad little), runs of samples otherwise.  Use it as ``DataLoader(dataset, batch_size=None,
    num_workers=K)``: each worker gets whole batches (at most one partial per rank), so every rank steps
    `len(self)` times, ``ceil(samples / B)`` (``floor`` with `drop_last`, which drops the partial batch).
    `batch_budget=T` instead of `batch_size` cuts each CorgiPile buffer into batches of varying size whose cost
    stays within T (tokens, frames, pixels: the manifest's size): `batch_cost` "padded" (default:
    ``n * max(size)``, size-sorted batches that pad little) or "sum" (the sizes' sum, for varlen or packed
    models).  A sample above T is a batch of its own.  Every rank takes the same `len(self)` steps, whatever
    the worker count; balance "size" makes each step's cost alike on every rank; resume counts batches
    (`corgi_io.schedule.budget_plan`, docs/algorithms.md).  A DataLoader's own `batch_size` batches each
    worker separately: up to K - 1 more batches than `len(loader)` says.  Every rank yields exactly
    `len(self)` items (samples, or batches) per epoch.  Arguments are checked here, before any read
    (ArgumentError).

    `cache_dir` (with `cache_limit`, bytes) keeps the pieces of a remote pack on local disk, checked when written
    and when read back, shared safely by the processes of a node; `cache_policy` "belady" (default) evicts the piece
    whose next use in this reader's known future (this epoch's rest, the next epoch) is furthest, "lru" the least
    recently read (`corgi_io.loaders.piece_cache`, docs/operations.md).  Local packs are never cached.

    A blend reads several packs with weights: ``source={"laion": "s3://...", "cc12m": "/lustre/cc12m"}``,
    `weights` ({name: weight} or a list in the sources' order; default: each pack's samples) and
    `samples_per_epoch` (an int, a source's name for one pass over it, or by default all the sources' samples).
    Each source gives its weight's share of every epoch; one too small is repeated (a fresh order each pass),
    one too large continues next epoch where this one stopped.  With `batch_size` every batch holds each source
    within one sample of ``weight * batch_size``; every sample says its `source`.  Balance, shuffles, resume and
    the cache work per source (`corgi_io.schedule.blend_plan`, docs/algorithms.md); `partitions` does not apply.

    Sequence packing: with `pack_length=L`, a pack of token ids (primary field a .npy array: ``corgi pack
    --tokenizer`` writes tokens.npy) yields rows of exactly L tokens, the documents concatenated in CorgiPile
    order, `eos_id` (if given) after each: dicts of `input_ids`, `position_ids` (0 at each piece of a document),
    `document_ids` (the sample index, -1 for padding), all int64 (L,) or (B, L) with `batch_size=B`, and
    `cu_seqlens` (int32, flash-attn varlen boundaries over the B*L flattened tokens) and `max_seqlen`.  A
    document is split across rows, or with `split_documents=False` starts a new row when it does not fit (the
    rest of the row is `pad_id`; a document longer than L spans whole rows); ``self.planner.waste()`` is the
    epoch's padding share.  Every rank yields `len(self)` items, every token once across ranks and workers.
    Resume is exact (rows counted per worker); another world size is a ResumeError.  Takes balance "count" or
    "size", shuffle "corgipile", "block" or "none"; refuses transform, group_by_size, drop_last, partitions,
    cache_dir, blends and on_error="skip" (`corgi_io.loaders.token_rows`, docs/algorithms.md).
    """

    def __init__(self, source, *, shuffle: str = "corgipile", buffer_blocks: int = 16, seed: int = 0,
                 rank=None, world_size=None, drop_last: bool = False, decode=None, transform=None,
                 prefetch_blocks: int | None = None, balance: str = "count", batch_size: int | None = None,
                 collate_fn=collate_samples, partitions: dict | None = None, read_threads: int | None = None,
                 storage_options: dict | None = None, verify_reads: bool = True,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, on_error: str = "raise", cache_dir=None,
                 cache_limit: int | None = None, cache_policy: str = "belady", weights=None,
                 samples_per_epoch=None, group_by_size: bool = False, batch_budget: int | None = None,
                 batch_cost: str = "padded", pack_length: int | None = None, eos_id: int | None = None,
                 split_documents: bool = True, pad_id: int = 0):
        super().__init__()
        rows = row_spec(pack_length, eos_id, split_documents, pad_id, decode)
        self.spec = check_options(shuffle=shuffle, buffer_blocks=buffer_blocks, seed=seed, drop_last=drop_last,
                                  transform=transform, prefetch_blocks=prefetch_blocks, balance=balance,
                                  batch_size=batch_size, collate_fn=collate_fn, partitions=partitions,
                                  read_threads=read_threads, storage_options=storage_options,
                                  verify_reads=verify_reads, max_pixels=max_pixels, on_error=on_error,
                                  cache_dir=cache_dir, cache_limit=cache_limit, cache_policy=cache_policy,
                                  group_by_size=group_by_size, batch_budget=batch_budget, batch_cost=batch_cost,
                                  rows=rows)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.decode = get_decoder(None if rows else decode, self.spec.max_pixels)
        self.packs = self._open(source, partitions, weights, samples_per_epoch)
        if getattr(self.decode, "on_device", False) and not self.fast_batches:
            raise ArgumentError("ImageDecoder(device=...) decodes whole batches of raw image bytes in the training "
                                "process: it needs batch_size, no transform, the default collate_fn and packs of "
                                "one field per sample")
        if rows is not None:
            check_token_pack(self.packs.manifest)
        self.epoch, self.cost_model = 0, None  # cost model: per-rank (a, b) agreed at set_epoch (balance="dynamic")
        self._planner = None             # the planner of (epoch, cost_model), built on first use
        self._shared_epoch = SharedEpoch(self.world_size)  # how set_epoch reaches persistent workers
        self._steps = StepLog()          # this rank's observed steps this epoch
        self.last_reader = None  # the reader of the latest iteration in this process (for its counters)
        self._resume_point = ResumePoint()  # this process's place in its epoch, in the planner's units

    def _open(self, source, partitions, weights, samples_per_epoch):
        """The pack (`OnePack`), or for a mapping of sources the blend (`PackBlend`), checked before any read."""
        if not isinstance(source, Mapping):
            if weights is not None or samples_per_epoch is not None:
                raise ArgumentError("weights= and samples_per_epoch= blend several packs: pass source= as a mapping "
                                    "{name: pack}")
            return OnePack(source, self.spec, partitions)
        if partitions is not None or self.spec.group_by_size or self.spec.batch_budget is not None or self.spec.rows:
            raise ArgumentError("partitions= (which pins one pack's shards to ranks), group_by_size=, batch_budget= "
                                "and pack_length= do not apply to a blend")
        blend = PackBlend(source, self.spec, weights, samples_per_epoch)
        blend.check_batchable(self.decode, self.spec.batch_size, self.spec.collate_fn)
        return blend

    def __getstate__(self):
        """For spawn workers and copies: no reader (locks), and the planner as it crosses to a copy
        (`Planner.portable`: a pack's without its table, which the manifest reopens; others not at all)."""
        planner = None if self._planner is None else self._planner.portable()
        return {**self.__dict__, "last_reader": None, "_planner": planner}

    def __setstate__(self, state: dict) -> None:
        """A copy's planner takes the reopened manifest's table: the rank planned at `set_epoch` comes along."""
        self.__dict__.update(state)
        if self._planner is not None:
            self._planner = replace(self._planner, table=block_table(self.manifest))

    @property
    def manifest(self):
        """The pack's manifest (a blend has one per source: ``packs.packs[s].manifest``)."""
        if isinstance(self.packs, PackBlend):
            raise AttributeError("a blend reads several packs: see dataset.packs.packs[s].manifest")
        return self.packs.manifest

    @property
    def storage(self):
        """This process's Storage of the pack (DataLoader workers each open their own)."""
        return self.packs.storage

    @property
    def block_owner(self):
        """Per block its rank under `partitions` (else None)."""
        return getattr(self.packs, "block_owner", None)

    @property
    def planner(self):
        """The pure planner of this epoch (and cost model): built once, when either changes (`set_epoch`, a
        loaded state, an epoch published to a worker), so each rank's pieces are planned once per epoch."""
        planner = self._planner  # a worker's copy of the cost model is equal, not the same: compared as text
        if planner is None or (planner.spec.epoch, repr(planner.cost_model)) != (self.epoch, repr(self.cost_model)):
            self._planner = self.packs.planner(self.world_size, self.epoch, self.cost_model)
        return self._planner

    def observe(self, seconds: float, sizes) -> None:
        """Report one training step of this rank: its wall time and the sizes of its batch (for balance="dynamic")."""
        self._steps.add(seconds, sizes)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose block order and shuffles the next iteration uses.

        With balance="dynamic", all ranks must call it together: they exchange their fitted speeds through
        torch.distributed.  DataLoader workers, persistent ones included, take the new epoch and cost model
        from shared memory when they start the next iteration.
        """
        self.epoch = int(epoch)
        if self.spec.balance == "dynamic":
            self.cost_model = self._steps.agree(self.world_size)
        self._shared_epoch.publish(self.epoch, self.cost_model)
        self.rank_pieces()  # plan this rank once, here: workers started after this inherit it

    def __len__(self) -> int:
        """Samples this rank yields per epoch, or its batches with `batch_size` (the same on every rank)."""
        return self.planner.rank_items(self.rank)

    def rank_pieces(self):
        """This rank's pieces (rows (block, start, stop), in read order) for the current epoch, planned once."""
        return self.planner.rank_pieces(self.rank)

    def worker_pieces(self, worker: int, num_workers: int):
        """The pieces one DataLoader worker of this rank reads this epoch: whole batches with `batch_size`, all
        but at most one worker."""
        return self.planner.worker_pieces(self.rank, worker, num_workers)

    def plan(self, worker: int = 0, num_workers: int = 1):
        """The buffer plan of one worker of this rank: (pieces to read, sample ids to yield) per buffer."""
        return self.planner.plan(self.rank, worker, num_workers)

    # --- resume: state_dict / load_state_dict in the torchdata StatefulDataLoader convention -----------------

    @functools.cached_property
    def _identity(self) -> dict:
        """What a saved state must agree on to resume this dataset (the world size and workers may differ)."""
        return self.spec.identity(self.packs.fingerprint, partitioned=self.block_owner is not None)

    def state_dict(self) -> dict:
        """This process's progress through the epoch as small JSON data (StatefulDataLoader collects it per worker)."""
        return self._resume_point.state(self._identity, self.epoch, self.world_size)

    def load_state_dict(self, state: dict) -> None:
        """Resume from a state saved by `state_dict`, or from a whole `StatefulDataLoader.state_dict()` of any one rank.

        The next iteration of the saved epoch continues it: exactly where it stopped when the world size and
        worker count are the same, else with the samples no rank yielded, spread over the new world
        (docs/algorithms.md).  ResumeError for a state of another pack, seed, shuffle, balance, batch size or
        buffer size.
        """
        merged = merge_states(find_states(state), self._identity)
        if merged["world_size"] != self.world_size and self.block_owner is not None:
            raise ResumeError("partitions= pins shards to ranks: resume it with the same world size")
        self._resume_point.loaded, self.epoch = merged, merged["epoch"]

    def __iter__(self):
        """This worker's samples of the epoch, its collated batches with `batch_size` or `batch_budget`, or its rows
        of tokens with `pack_length`."""
        # Eagerly, before the first item: a persistent worker's state is saved as soon as its new iteration is
        # made (StatefulDataLoader), and must already be that epoch's start, not the end of the last one.
        self.epoch, self.cost_model = self._shared_epoch.latest(self.epoch, self.cost_model)
        self._resume_point.begin()
        spec = self.spec  # progress counts samples: a batch boundary when a batch is out
        if spec.rows is not None:
            return self._rows()
        if self.fast_batches:
            return self._row_batches()
        if spec.batch_budget is not None:  # the plan lists one batch per item: their sizes, as it is made
            sizes = collections.deque()
            return collated_batches(self._samples(sizes), iter(sizes.popleft, None), spec.collate_fn)
        if spec.batch_size is not None:  # an ImageDecoder's images go straight into their batch (`BatchSlots`)
            return collated_batches(self._samples(slots=spec.batch_size), itertools.repeat(spec.batch_size),
                                    spec.collate_fn)
        return self._samples()

    @functools.cached_property
    def fast_batches(self) -> bool:
        """Whether batches are built without a dict per sample (`corgi_io.loaders.fast_batches`): raw bytes, the
        default collate, packs of one field per sample, batches of `batch_size`."""
        manifests = [pack.manifest for pack in getattr(self.packs, "packs", [self.packs])]
        return fast_batches_apply(self.spec, self.decode, manifests)

    def _start(self, batch_sizes=None):
        """(reader, plan, worker) of this worker's iteration: the epoch `__iter__` took, its reader and its buffer
        plan from where it stands (a loaded state), through the remote cache when there is one.  Given a deque
        `batch_sizes`, the sizes of the plan's items (budgeted batches: a planner that counts items gives its
        plan whole) are added there."""
        worker, num_workers = worker_and_count()
        planner = self.planner
        reader = self.last_reader = self.packs.reader(planner)
        plan = self._resume_point.start(planner, self.rank, worker, num_workers)
        if batch_sizes is not None:
            batch_sizes.extend(len(order) for _, order in plan)
        readers = self.packs.piece_readers(reader)
        if any(r.cache is not None for r in readers):  # the next epoch's plan is the rest of the known future
            upcoming = self.packs.planner(self.world_size, self.epoch + 1, self.cost_model)
            plan = cached_epoch(readers, plan, self.packs.local(planner), upcoming.plan(self.rank, worker, num_workers),
                                self.packs.local(upcoming), self.spec.prefetch_blocks)
        return reader, plan, worker

    def _samples(self, batch_sizes=None, slots=None):
        """This worker's samples of the epoch, in the plan's order: read, decoded and transformed (`_start` for
        `batch_sizes`; `slots`: the fixed batch size whose batches an ImageDecoder fills in place)."""
        reader, plan, worker = self._start(batch_sizes)
        decode = epoch_decoder(self.decode, self.spec.seed, self.epoch)  # clips and crops follow (seed, epoch, index)
        if slots is not None:
            decode = batch_slots(decode, slots)
        prepare = SamplePreparer(decode, self.spec.transform, self.spec.on_error, self.packs.locate,
                                 f"rank {self.rank} worker {worker}")
        for sample in reader.samples(plan):
            self._resume_point.yielded += 1
            yield prepare(sample)  # under on_error="skip", a failed sample is its DecodeError (collated_batches)
        prepare.finish()

    def _row_batches(self):
        """This worker's batches of the epoch, the same as `collated_batches` of `_samples`, built from the read
        pieces with numpy (`fast_batches`)."""
        reader, plan, _ = self._start()  # in a DataLoader worker, batches cross to the main process in shared memory
        allocate = shared_buffer if torch.utils.data.get_worker_info() is not None else None
        images = epoch_decoder(self.decode, self.spec.seed, self.epoch)  # None, or an ImageDecoder on a device
        for rows in reader.batches(plan, self.spec.batch_size, allocate):
            self._resume_point.yielded += len(rows.offsets) - 1
            yield row_batch(rows, images)

    def _rows(self):
        """This worker's rows of tokens (`pack_length`), or batches of rows, counted in rows for resume."""
        reader, ranges, _ = self._start()  # a row planner's plan is the worker's row ranges
        for item in row_items(reader, self.planner.streams[self.rank], ranges, self.spec.rows, self.spec.batch_size):
            self._resume_point.yielded += len(item["input_ids"]) if self.spec.batch_size else 1
            yield item


for _option in fields(LoaderSpec):  # the options read as before (`ds.seed`, `ds.batch_size`...), from the spec
    setattr(CorgiPileDataset, _option.name, property(attrgetter(f"spec.{_option.name}"),
                                                     doc=f"The `{_option.name}` option (fixed: see `spec`)."))
del _option

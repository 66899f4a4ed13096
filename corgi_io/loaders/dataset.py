"""CorgiPileDataset: a torch IterableDataset that streams a corgi pack with two-level shuffling.

Per epoch: the planning core (`corgi_io.schedule`) orders the blocks, gives every rank
the same number of samples, splits a rank's share among DataLoader workers, and groups
each worker's pieces into shuffle buffers.  `PieceReader` then reads each piece with one
ranged read, ahead of the consumer, and the samples come out in the plan's order.  The
dataset holds its checked options (`spec`, frozen), the epoch's `Planner` (`corgi_io.schedule.planner`) and
its place in the epoch (`resume_point`); one worker's pass over its share is `corgi_io.loaders.worker_pass`.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import torch

from corgi_io.errors import ArgumentError, ResumeError
from corgi_io.schedule import find_states, merge_states

from corgi_io.loaders.decode import get_decoder
from corgi_io.loaders.distributed import StepLog, rank_and_world
from corgi_io.loaders.fast_batches import fast_batches_apply
from corgi_io.loaders.options import Batches, Blend, Budget, Cache, Decoding, Ranks, Reading, Shuffle, TokenRows
from corgi_io.loaders.packs import OnePack, PackBlend
from corgi_io.loaders.pipeline_stats import PipelineStats
from corgi_io.loaders.resume_point import ResumePoint
from corgi_io.loaders.shared_epoch import SharedEpoch
from corgi_io.loaders.loader_spec import block_table, loader_spec
from corgi_io.loaders.token_rows import check_token_pack
from corgi_io.loaders.worker_pass import worker_items


class CorgiPileDataset(torch.utils.data.IterableDataset):
    """A pack (or a `Blend` of packs) as a torch IterableDataset, CorgiPile-shuffled, built from parts
    (`corgi_io.loaders.options`; each checks itself, `loaders/loader_spec.py` checks them together, before any read).

    Items are samples ``{"index", "key", "label", "size", "kind", "ext", "data"}`` (a blend's also say their
    `source`); with `batching` they are batches (`Batches`, `Budget`: ``collate_fn(samples)``) or rows of tokens
    (`TokenRows`).  Every rank yields exactly `len(self)` items per epoch, whatever its worker count: use it as
    ``DataLoader(dataset, batch_size=None, num_workers=K)`` (a DataLoader's own batch_size batches each worker
    apart: up to K - 1 more batches than `len(loader)` says).  `decode`: a `Decoding`, or its `how` alone
    ("rgb", "text", a callable such as `ImageDecoder(...)`...); `transform` then maps each decoded sample's data.
    `seed` fixes every random choice: the same seed, epoch and world size give the same items.  `verify` (on by
    default, `Reading`) checks each record's checksum before its sample is yielded (CorruptDataError naming the
    shard, byte offset and key).  Resume with `state_dict` / `load_state_dict` (torchdata's StatefulDataLoader):
    exact at the same world size and worker count, elastic otherwise (docs/algorithms.md).
    """

    def __init__(self, source, *, shuffle: Shuffle = Shuffle(), seed: int = 0, ranks: Ranks = Ranks(),
                 batching: Batches | Budget | TokenRows | None = None, decode=None, transform=None,
                 reading: Reading = Reading(), cache: Cache | None = None):
        super().__init__()
        decoding = decode if isinstance(decode, Decoding) else Decoding(decode)
        self.spec = loader_spec(source, shuffle=shuffle, seed=seed, ranks=ranks, batching=batching,
                                decoding=decoding, transform=transform, reading=reading, cache=cache)
        self.rank, self.world_size = rank_and_world(ranks.rank, ranks.world_size)
        self.decode = get_decoder(None if self.spec.rows else decoding.how, self.spec.max_pixels)
        self.packs = self._open(source)
        if decoding.on_device and not self.fast_batches:  # the parts are checked: what is left is the pack's
            raise ArgumentError("ImageDecoder(device=...) decodes whole batches of raw image bytes: it needs packs "
                                "of one field per sample")
        self.epoch, self.cost_model = 0, None  # cost model: per-rank (a, b) agreed at set_epoch (balance="dynamic")
        self._planner = None             # the planner of (epoch, cost_model), built on first use
        self._shared_epoch = SharedEpoch(self.world_size)  # how set_epoch reaches persistent workers
        self._steps = StepLog()          # this rank's observed steps this epoch
        self.last_reader = None  # the reader of the latest iteration in this process (for its counters)
        self.stats = PipelineStats(self.spec.timing)  # where the time goes, every worker's (`stats.snapshot()`)
        self.resume_point = ResumePoint()  # this process's place in its epoch, in the planner's units

    def _open(self, source):
        """The pack (`OnePack`), or the `PackBlend` of a `Blend`, checked against the options before any read."""
        if not isinstance(source, Blend):
            pack = OnePack(source, self.spec)
            if self.spec.rows is not None:
                check_token_pack(pack.manifest)
            return pack
        blend = PackBlend(source, self.spec)
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

        With torch.distributed initialised it is a collective, as `DistributedSampler.set_epoch` is called:
        every rank calls it, every epoch (a rank that does not leaves the others waiting in it).  The ranks
        exchange their time per stage (`stats.end_epoch`, zeros under `Reading(timing="off")`, so ranks that
        disagree on timing still meet; rank 0 logs the straggler) and, with balance="dynamic", their fitted
        speeds.  DataLoader workers, persistent ones included, take the new epoch and cost model from shared
        memory when they start the next iteration.
        """
        self.stats.end_epoch(self.epoch, self.rank, self.world_size)
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
        return self.resume_point.state(self._identity, self.epoch, self.world_size)

    def load_state_dict(self, state: dict) -> None:
        """Resume from a state saved by `state_dict`, or from a whole `StatefulDataLoader.state_dict()` of any one rank.

        The next iteration of the saved epoch continues it: exactly where it stopped when the world size and
        worker count are the same, else with the samples no rank yielded, spread over the new world
        (docs/algorithms.md).  ResumeError for a state of another pack, seed, shuffle, balance, batch size or
        buffer size.
        """
        merged = merge_states(find_states(state), self._identity)
        if merged["world_size"] != self.world_size and self.block_owner is not None:
            raise ResumeError("Ranks(partitions=) pins shards to ranks: resume it with the same world size")
        self.resume_point.loaded, self.epoch = merged, merged["epoch"]

    def __iter__(self):
        """This worker's items of the epoch (`corgi_io.loaders.worker_pass`): samples, batches or rows of tokens."""
        # Eagerly, before the first item: a persistent worker's state is saved as soon as its new iteration is
        # made (StatefulDataLoader), and must already be that epoch's start, not the end of the last one.
        self.epoch, self.cost_model = self._shared_epoch.latest(self.epoch, self.cost_model)
        self.resume_point.begin()
        return worker_items(self)

    @functools.cached_property
    def fast_batches(self) -> bool:
        """Whether batches are built without a dict per sample (`corgi_io.loaders.fast_batches`): raw bytes, the
        default collate, packs of one field per sample read whole (no `Reading(fields=)` left once checked
        against them: asking a one-field pack's field is a whole read), `Batches` of a fixed size."""
        packs = getattr(self.packs, "packs", [self.packs])
        return fast_batches_apply(self.spec, self.decode, [pack.manifest for pack in packs]) and \
            all(pack.fields is None for pack in packs)

"""CorgiPileDataset: a torch IterableDataset that streams a corgi pack with two-level shuffling.

Per epoch: the planning core (`corgi_io.schedule`) orders the blocks, gives every rank
the same number of samples, splits a rank's share among DataLoader workers, and groups
each worker's pieces into shuffle buffers.  `PieceReader` then reads each piece with one
ranged read, ahead of the consumer, and the samples come out in the plan's order.
"""
from __future__ import annotations

import itertools
import os
import warnings

import numpy as np
import torch

from corgi_io.reading import PieceReader
from corgi_io.manifest import open_manifest
from corgi_io.schedule import (BlockTable, EpochSpec, block_order, block_pieces, buffer_plan, fit_cost, piece_counts,
                               rank_plan, samples_per_rank, worker_share)
from corgi_io.schedule.resume import (consumed_samples, find_states, merge_states, pack_fingerprint, remainder_pieces,
                                      skip_consumed, worker_state)
from corgi_io.schedule.workers import batch_count
from corgi_io.errors import ArgumentError, ResumeError
from corgi_io.storage import open_storage

from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.decode import DEFAULT_MAX_PIXELS, epoch_decoder, get_decoder
from corgi_io.loaders.distributed import gather_cost_models, rank_and_world, worker_and_count
from corgi_io.loaders.on_error import SamplePreparer, batch_survivors
from corgi_io.loaders.options import check_options
from corgi_io.loaders.shared_epoch import SharedEpoch

_warned_static_fallback = False


class CorgiPileDataset(torch.utils.data.IterableDataset):
    """Samples of a pack as dicts ``{"index", "key", "label", "size", "kind", "ext", "data"}``, CorgiPile-shuffled.

    `shuffle`: "corgipile" (block order + buffer shuffle), "block" (block order only),
    "window" (the tf.data/webdataset baseline: a sliding shuffle buffer holding as many
    samples as `buffer_blocks` blocks, over the stored order), "none" (stored order), or
    "full" (per-sample random access, one read per sample).
    `buffer_blocks` pieces form one shuffle buffer; `prefetch_blocks` more are read ahead.
    `decode`: None (bytes), "pil", "rgb", "text", "video" (8-frame clips), "auto" (by each
    sample's kind), or a callable(data, sample) such as `VideoDecoder(frames=16, clip="random")`
    (see `corgi_io.loaders.decode`); `transform` then maps the decoded data.  "pil", "rgb" and
    "video" refuse images (clips: frames x H x W) above `max_pixels` (Pillow's limit by default)
    before decoding them, and the built-in decoders of one kind refuse samples of another kind.
    A decode failure is a DecodeError naming the shard, byte offset and key; `on_error="raise"`
    (default) raises it, `on_error="skip"` (needs `batch_size`) drops the sample with a warning
    and yields its batch one sample shorter, and raises only for a batch whose every sample
    fails (`corgi_io.loaders.on_error`).  Every rank yields exactly `len(self)` items per epoch
    (samples, or batches).  Arguments are checked here, before any read (ArgumentError).

    `verify_reads` (on by default) checks each shard's size on its first read and every
    record's checksum before the sample is yielded: a mismatch raises CorruptDataError naming
    the shard, byte offset and key, before that sample or any later one is yielded.

    `balance`: "count" (equal samples), "size" (equal samples and equal size sums), or
    "dynamic" (equal samples, size budgets proportional to each rank's measured speed:
    report steps with `observe`; ranks exchange their fits at `set_epoch`).  "size" and
    "dynamic" need `batch_size` (and shuffle "corgipile"): they balance every step's batch;
    an epoch balanced only in its sums has steps slower than count balance's.
    `partitions` maps rank -> shard paths so a rank reads only its own shards (node-local
    data); counts stay equal.

    Batches: with `batch_size=B` the dataset yields whole batches, each `collate_fn(samples)`
    (default `collate_samples`: equal-shape arrays stacked, so decode to a fixed size with a
    resize `transform`), and `len(self)` is the batches per rank, ``ceil(samples / B)``, or
    ``floor`` with `drop_last` (which then also drops each rank's partial batch).  Use it as
    ``DataLoader(dataset, batch_size=None, num_workers=K)``: every worker gets whole batches
    but at most one per rank, so `len(loader)` is the number of batches that come out and every
    rank steps the same number of times.  Under "corgipile" the batches are size-balanced
    inside each buffer; in the other modes they are runs of consecutive samples.  One batch
    crosses the worker queue as one object (raw bytes as one buffer, `PackedBytes`).
    Without `batch_size`, `DataLoader(dataset, batch_size=B, num_workers=K)` batches each
    worker's samples separately: each worker may end with a partial batch, so up to K - 1 more
    batches come out than `len(loader)` says; pass `batch_size` to the dataset instead.
    """

    def __init__(self, source, *, shuffle: str = "corgipile", buffer_blocks: int = 16, seed: int = 0,
                 rank=None, world_size=None, drop_last: bool = False, decode=None, transform=None,
                 prefetch_blocks: int | None = None, balance: str = "count", batch_size: int | None = None,
                 collate_fn=collate_samples, partitions: dict | None = None, read_threads: int | None = None,
                 storage_options: dict | None = None, verify_reads: bool = True,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, on_error: str = "raise"):
        super().__init__()
        o = check_options(shuffle=shuffle, buffer_blocks=buffer_blocks, seed=seed, drop_last=drop_last,
                          transform=transform, prefetch_blocks=prefetch_blocks, balance=balance, batch_size=batch_size,
                          collate_fn=collate_fn, partitions=partitions, read_threads=read_threads,
                          storage_options=storage_options, verify_reads=verify_reads, max_pixels=max_pixels,
                          on_error=on_error)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.decode, self.transform, self.on_error = get_decoder(decode, o["max_pixels"]), transform, on_error
        self.manifest = open_manifest(source, o["storage_options"])
        self.shuffle, self.buffer_blocks, self.seed = shuffle, o["buffer_blocks"], o["seed"]
        self.drop_last, self.balance = o["drop_last"], balance
        self.batch_size, self.collate_fn = o["batch_size"], collate_fn
        self.verify_reads = o["verify_reads"]
        self.prefetch_blocks = self.buffer_blocks if prefetch_blocks is None else o["prefetch_blocks"]
        self.read_threads = o["read_threads"]  # reads in flight; None: the storage's (2 local; remote 1, grown to 8)
        self.storage_options = o["storage_options"]
        self.block_owner = None if partitions is None else self._block_owner(partitions)
        self.epoch = 0
        self.cost_model = None           # per-rank (a, b) agreed at the last set_epoch, for balance="dynamic"
        self._shared_epoch = SharedEpoch(self.world_size)  # how set_epoch reaches persistent workers
        self._steps = ([], [], [])       # this rank's observed (size sum, samples, seconds) per step
        self._storage, self._storage_pid = None, None
        self.last_reader = None  # the PieceReader of the latest iteration in this process (for its counters)
        self._rank_cache = None  # (epoch key, this rank's pieces): planned once per rank and epoch
        self._fingerprint = None  # of the pack, for resume states
        self._resume = None      # a merged saved state, applied by the next iteration of its epoch
        self._progress = None    # (epoch, finished segments, world, workers, worker) of this process's iteration
        self._yielded = 0        # samples that iteration has yielded, counting those a resume skipped

    def __getstate__(self):
        """What DataLoader workers (spawn, forkserver) and copies get: no open storage, no last reader (locks)."""
        return {**self.__dict__, "_storage": None, "_storage_pid": None, "last_reader": None}

    @property
    def storage(self):
        """This process's Storage (DataLoader workers each open their own)."""
        if self._storage is None or self._storage_pid != os.getpid():
            self._storage = open_storage(self.manifest.root, **self.storage_options)
            self._storage_pid = os.getpid()
        return self._storage

    def _block_owner(self, partitions: dict):
        """Turn {rank: [shard paths]} into one owning rank per block."""
        owner_of_shard = {}
        for rank, paths in partitions.items():
            for path in paths:
                if path in owner_of_shard:
                    raise ArgumentError(f"partitions: shard {path!r} is given to ranks {owner_of_shard[path]} "
                                        f"and {rank}")
                owner_of_shard[path] = int(rank)
        missing = [sh.path for sh in self.manifest.shards if sh.path not in owner_of_shard]
        if missing:
            raise ArgumentError(f"partitions: shard {missing[0]!r} (and {len(missing) - 1} more) belongs to no rank")
        shard_owner = np.array([owner_of_shard[sh.path] for sh in self.manifest.shards], dtype=np.int64)
        return shard_owner[self.manifest.blocks.shard]

    def observe(self, seconds: float, sizes) -> None:
        """Report one training step of this rank: its wall time and the sizes of its batch (for balance="dynamic")."""
        sizes = sizes.tolist() if hasattr(sizes, "tolist") else list(sizes)
        for column, value in zip(self._steps, (sum(sizes), len(sizes), float(seconds))):
            column.append(value)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose block order and shuffles the next iteration uses.

        With balance="dynamic", all ranks must call it together: they exchange their fitted
        speeds through torch.distributed.  DataLoader workers, persistent ones included, take
        the new epoch and cost model from shared memory when they start the next iteration.
        """
        self.epoch = int(epoch)
        if self.balance == "dynamic":
            local = fit_cost(*self._steps)
            self.cost_model = gather_cost_models(local, self.world_size)
            self._steps = ([], [], [])
            global _warned_static_fallback
            if self.cost_model is None and self.world_size > 1 and not _warned_static_fallback:
                _warned_static_fallback = True
                warnings.warn("balance='dynamic' has no process group or no measured steps yet; "
                              "using static size balance this epoch", stacklevel=2)
        self._shared_epoch.publish(self.epoch, self.cost_model)
        self.rank_pieces()  # plan this rank once, here: workers started after this inherit it

    def __len__(self) -> int:
        """Samples this rank yields per epoch, or its batches with `batch_size` (the same on every rank)."""
        if self.block_owner is None:
            samples = samples_per_rank(self.manifest.num_samples, self.world_size, self.drop_last)
        else:  # partitions: the largest partition's count (the smallest with drop_last), as the plan has it
            samples = int(piece_counts(self.rank_pieces()).sum())
        return samples if self.batch_size is None else batch_count(samples, self.batch_size, self.drop_last)

    def _spec(self, world_size: int | None = None, balance: str | None = None) -> EpochSpec:
        """The options this epoch's plan is a function of (this world by default)."""
        window = int(self.buffer_blocks * self.manifest.blocks.count.mean()) if len(self.manifest.blocks) else 1
        if balance is None:
            balance = self.balance if self.balance != "dynamic" or self.cost_model is not None else "size"
        return EpochSpec(world_size or self.world_size, seed=self.seed, epoch=self.epoch, balance=balance,
                         drop_last=self.drop_last, shuffle=self.shuffle, buffer_pieces=self.buffer_blocks,
                         window_samples=max(1, window),
                         batch_size=self.batch_size if self.shuffle == "corgipile" else None)

    def rank_pieces(self, table=None, world_size: int | None = None, rank: int | None = None) -> np.ndarray:
        """A rank's pieces (this rank of this world by default) for the current epoch, computed once per epoch.

        `table` (rows (block, start, stop)), when given, is a resume remainder: it is planned as
        if each row were a block, count-balanced, and its rows map back to the pack's blocks.
        """
        world_size, rank = world_size or self.world_size, self.rank if rank is None else rank
        key = (self.epoch, repr(self.cost_model), world_size, rank, None if table is None else table.tobytes())
        if self._rank_cache is None or self._rank_cache[0] != key:
            self._rank_cache = key, self._plan_rank(table, world_size, rank)
        return self._rank_cache[1]

    def _plan_rank(self, table, world_size: int, rank: int) -> np.ndarray:
        m = self.manifest
        if table is None:
            blocks = BlockTable(m.blocks.first, m.blocks.count, m.blocks.size_sum, m.samples.size)
            return rank_plan(blocks, self._spec(world_size), rank, cost_model=self.cost_model, owner=self.block_owner)
        runs = BlockTable(table[:, 1], table[:, 2] - table[:, 1])
        pieces = rank_plan(runs, self._spec(world_size, balance="count"), rank)
        return np.column_stack([table[pieces[:, 0], 0], pieces[:, 1:]]) if len(pieces) else pieces

    def worker_pieces(self, worker: int, num_workers: int, table=None, world_size=None, rank=None):
        """The pieces one DataLoader worker of a rank reads this epoch (see `rank_pieces`): whole batches
        with `batch_size`, all but at most one worker."""
        return worker_share(self.rank_pieces(table, world_size, rank), num_workers, worker,
                            self.batch_size or 1, self.drop_last)

    def _shuffles_blocks(self) -> bool:
        return self._spec().shuffle_blocks

    def plan(self, worker: int = 0, num_workers: int = 1, table=None, world_size=None, rank=None):
        """The buffer plan of one worker: (pieces to read, sample ids to yield) per buffer."""
        rank = self.rank if rank is None else rank
        return buffer_plan(self.worker_pieces(worker, num_workers, table, world_size, rank),
                           sizes=self.manifest.samples.size, **self._spec(world_size).stream(rank, worker))

    # --- resume: state_dict / load_state_dict in the torchdata StatefulDataLoader convention -----------------

    def _identity(self) -> dict:
        """What a saved state must agree on to resume this dataset (the world size and workers may differ)."""
        m = self.manifest
        if self._fingerprint is None:  # O(shards): once per dataset
            self._fingerprint = pack_fingerprint(m.format, m.checksum, m.options, m.shards)
        return {"pack": self._fingerprint, "seed": self.seed,
                "shuffle": self.shuffle, "balance": self.balance, "drop_last": self.drop_last,
                "batch_size": self.batch_size, "buffer_blocks": self.buffer_blocks,
                "partitioned": self.block_owner is not None}

    def state_dict(self) -> dict:
        """This process's progress through the epoch as small JSON data (StatefulDataLoader collects it per worker)."""
        if self._resume is not None and self._progress is None:  # loaded, not yet resumed: save the same point
            r = self._resume
            return {"pending": [worker_state(self._identity(), r["epoch"], r["finished"], r["world_size"],
                                             r["num_workers"], worker, count) for worker, count in r["yielded"].items()]}
        if self._progress is None:  # not iterated yet in this process (a worker that has yielded nothing)
            worker, workers = worker_and_count()
            self._progress, self._yielded = (self.epoch, [], self.world_size, workers, worker), 0
        return worker_state(self._identity(), *self._progress, self._yielded)

    def load_state_dict(self, state: dict) -> None:
        """Resume from a state saved by `state_dict`, or from a whole `StatefulDataLoader.state_dict()` of any one rank.

        The next iteration of the saved epoch continues it: exactly where it stopped when the
        world size and worker count are the same, else with the samples no rank yielded, spread
        over the new world (docs/algorithms.md).  Raises ResumeError for a state of another
        pack, seed, shuffle, balance, batch size or buffer size.
        """
        merged = merge_states(find_states(state), self._identity())
        if merged["world_size"] != self.world_size and self.block_owner is not None:
            raise ResumeError("partitions= pins shards to ranks: resume it with the same world size")
        self._resume = merged
        self.epoch = merged["epoch"]

    def _epoch_plan(self, worker: int, num_workers: int):
        """(buffer plan, finished segments, yielded so far) of this worker for the current epoch, resumed if due."""
        resume, self._resume = (self._resume, None) if self._resume and self._resume["epoch"] == self.epoch \
            else (None, self._resume)
        if resume is None:
            return self.plan(worker, num_workers), [], 0
        finished = resume["finished"]
        if (self.world_size, num_workers) == (resume["world_size"], resume["num_workers"]) \
                and worker in resume["yielded"]:
            plan = list(self.plan(worker, num_workers, self._remainder(finished)))
            return skip_consumed(plan, resume["yielded"][worker]), finished, resume["yielded"][worker]
        if len(resume["yielded"]) != resume["num_workers"]:
            raise ResumeError(f"the state holds {len(resume['yielded'])} of {resume['num_workers']} workers' "
                              "progress; resuming with another world size or worker count needs the whole "
                              "StatefulDataLoader state of one rank")
        finished = finished + [{"world_size": resume["world_size"], "num_workers": resume["num_workers"],
                                "yielded": [resume["yielded"][w] for w in range(resume["num_workers"])]}]
        return self.plan(worker, num_workers, self._remainder(finished)), finished, 0

    def _remainder(self, finished: list):
        """The pieces no rank yielded in the `finished` segments of this epoch (None: no segment finished)."""
        if not finished:
            return None
        m = self.manifest
        table = block_pieces(block_order(len(m.blocks), self.seed, self.epoch, self._shuffles_blocks()),
                             m.blocks.first, m.blocks.count)
        previous = None
        for segment in finished:
            def orders_of(rank, worker, previous=previous, segment=segment):
                plan = self.plan(worker, segment["num_workers"], previous, segment["world_size"], rank)
                return (order for _, order in plan)

            consumed = consumed_samples(m.num_samples, orders_of, segment["world_size"], segment["yielded"])
            table = previous = remainder_pieces(table, consumed)
        return table

    def __iter__(self):
        """This worker's samples of the epoch, or its collated batches with `batch_size`."""
        samples = self._samples()
        return samples if self.batch_size is None else self._batches(samples)

    def _batches(self, samples):
        """`collate_fn` of each run of `batch_size` samples; the worker's count is whole batches but for the
        rank's last one.  `_yielded` counts samples: it is a batch boundary whenever a batch is out.
        Under on_error="skip" a batch leaves out its samples that failed to decode."""
        while batch := list(itertools.islice(samples, self.batch_size)):
            yield self.collate_fn(batch_survivors(batch))

    def _samples(self):
        self.epoch, self.cost_model = self._shared_epoch.latest(self.epoch, self.cost_model)
        worker, num_workers = worker_and_count()
        reader = PieceReader(self.manifest, self.storage, self.prefetch_blocks, self.read_threads,
                             verify=self.verify_reads)
        self.last_reader = reader
        plan, finished, self._yielded = self._epoch_plan(worker, num_workers)
        self._progress = (self.epoch, finished, self.world_size, num_workers, worker)
        decode = epoch_decoder(self.decode, self.seed, self.epoch)  # random video clips follow (seed, epoch, index)
        prepare = SamplePreparer(decode, self.transform, self.on_error, self._locate,
                                 f"rank {self.rank} worker {worker}")
        for sample in reader.samples(plan):
            self._yielded += 1
            yield prepare(sample)  # under on_error="skip", a sample that failed is its DecodeError (see _batches)
        prepare.finish()

    def _locate(self, index: int) -> tuple:
        """(shard URL, shard path, byte offset of the payload) of sample `index`, for error messages."""
        m = self.manifest
        path = m.shards[int(m.samples.shard[index])].path
        return self.storage.url(path), path, int(m.samples.data_offset[index])


"""CorgiPileDataset: a torch IterableDataset that streams a corgi pack with two-level shuffling.

Per epoch: the planning core (`corgi_io.schedule`) orders the blocks, gives every rank
the same number of samples, splits a rank's share among DataLoader workers, and groups
each worker's pieces into shuffle buffers.  `BlockReader` then reads each piece with one
ranged read, ahead of the consumer, and the samples come out in the plan's order.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import torch

from corgi_io.block_reader import BlockReader
from corgi_io.manifest import open_manifest
from corgi_io.schedule import BALANCE_MODES, SHUFFLE_MODES, assign_ranks, check_mode, buffer_plan, fit_cost, samples_per_rank, split_workers
from corgi_io.errors import CorruptDataError, plain_message
from corgi_io.storage import open_storage

from .decode import DEFAULT_MAX_PIXELS, get_decoder
from .distributed import gather_cost_models, rank_and_world, worker_and_count
from .shared_epoch import SharedEpoch

_warned_static_fallback = False


class CorgiPileDataset(torch.utils.data.IterableDataset):
    """Samples of a pack as dicts ``{"key", "label", "size", "data", "index"}``, CorgiPile-shuffled by default.

    `shuffle`: "corgipile" (block order + buffer shuffle), "block" (block order only),
    "window" (the tf.data/webdataset baseline: a sliding shuffle buffer holding as many
    samples as `buffer_blocks` blocks, over the stored order), "none" (stored order), or
    "full" (per-sample random access, one read per sample).
    `buffer_blocks` pieces form one shuffle buffer; `prefetch_blocks` more are read ahead.
    `decode`: None (bytes), "pil", "rgb", "text" or a callable(data, sample); `transform`
    then maps the decoded data.  A decode failure raises CorruptDataError naming the key and
    shard; "pil" and "rgb" refuse images above `max_pixels` (Pillow's limit by default) before
    decoding them.  Every rank yields exactly `len(self)` samples per epoch.

    `verify_reads` (on by default) checks each shard's size on its first read and every
    record's checksum before the sample is yielded: a mismatch raises CorruptDataError naming
    the shard, byte offset and key, before that sample or any later one is yielded.

    `balance`: "count" (equal samples), "size" (equal samples and equal size sums), or
    "dynamic" (equal samples, size budgets proportional to each rank's measured speed:
    report steps with `observe`; ranks exchange their fits at `set_epoch`).
    `batch_size` (corgipile only) composes size-balanced batches inside each buffer; use
    the same batch size in the DataLoader.  `partitions` maps rank -> shard paths so a
    rank reads only its own shards (node-local data); counts stay equal.
    """

    def __init__(self, source, *, shuffle: str = "corgipile", buffer_blocks: int = 16, seed: int = 0,
                 rank=None, world_size=None, drop_last: bool = False, decode=None, transform=None,
                 prefetch_blocks: int | None = None, balance: str = "count", batch_size: int | None = None,
                 partitions: dict | None = None, read_threads: int | None = None,
                 storage_options: dict | None = None, verify_reads: bool = True,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS):
        super().__init__()
        check_mode("shuffle", shuffle, SHUFFLE_MODES)
        check_mode("balance", balance, BALANCE_MODES)
        if batch_size is not None and shuffle != "corgipile":
            raise ValueError("batch_size composes size-balanced batches inside CorgiPile buffers: it needs "
                             "shuffle='corgipile'")
        self.manifest = open_manifest(source, storage_options)
        self.shuffle, self.buffer_blocks, self.seed = shuffle, int(buffer_blocks), int(seed)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.drop_last, self.balance, self.batch_size = drop_last, balance, batch_size
        self.decode, self.transform = get_decoder(decode, max_pixels), transform
        self.verify_reads = verify_reads
        self.prefetch_blocks = self.buffer_blocks if prefetch_blocks is None else int(prefetch_blocks)
        self.read_threads = read_threads  # reads in flight; None: the storage's default (2 local, 4 remote)
        self.storage_options = storage_options or {}
        self.block_owner = None if partitions is None else self._block_owner(partitions)
        self.epoch = 0
        self.cost_model = None           # per-rank (a, b) agreed at the last set_epoch, for balance="dynamic"
        self._shared_epoch = SharedEpoch(self.world_size)  # how set_epoch reaches persistent workers
        self._steps = ([], [], [])       # this rank's observed (size sum, samples, seconds) per step
        self._storage, self._storage_pid = None, None
        self.last_reader = None  # the BlockReader of the latest iteration in this process (for its counters)

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
                    raise ValueError(f"partitions: shard {path!r} is given to ranks {owner_of_shard[path]} and {rank}")
                owner_of_shard[path] = int(rank)
        missing = [sh.path for sh in self.manifest.shards if sh.path not in owner_of_shard]
        if missing:
            raise ValueError(f"partitions: shard {missing[0]!r} (and {len(missing) - 1} more) belongs to no rank")
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

    def __len__(self) -> int:
        """Samples this rank yields per epoch (the same on every rank)."""
        return samples_per_rank(self.manifest.num_samples, self.world_size, self.drop_last)

    def worker_pieces(self, worker: int, num_workers: int):
        """The pieces one DataLoader worker of this rank reads this epoch."""
        m = self.manifest
        balance = self.balance if self.balance != "dynamic" or self.cost_model is not None else "size"
        ranks = assign_ranks(m.blocks.first, m.blocks.count, self.world_size, seed=self.seed, epoch=self.epoch,
                             balance=balance, drop_last=self.drop_last,
                             sizes=m.samples.size if balance != "count" else None, cost_model=self.cost_model,
                             partitions=self.block_owner,
                             shuffle_blocks=self.shuffle not in ("none", "window"))  # the baselines keep stored order
        return split_workers(ranks[self.rank], num_workers)[worker]

    def plan(self, worker: int = 0, num_workers: int = 1):
        """The buffer plan of one worker: (pieces to read, sample ids to yield) per buffer."""
        m = self.manifest
        window = int(self.buffer_blocks * m.blocks.count.mean()) if len(m.blocks) else 1
        return buffer_plan(self.worker_pieces(worker, num_workers), shuffle=self.shuffle,
                           buffer_pieces=self.buffer_blocks, seed=self.seed, epoch=self.epoch, rank=self.rank,
                           worker=worker, window_samples=max(1, window), sizes=m.samples.size,
                           batch_size=self.batch_size)

    def __iter__(self):
        self.epoch, self.cost_model = self._shared_epoch.latest(self.epoch, self.cost_model)
        worker, num_workers = worker_and_count()
        reader = BlockReader(self.manifest, self.storage, self.prefetch_blocks, self.read_threads,
                             verify=self.verify_reads)
        self.last_reader = reader
        for sample in reader.samples(self.plan(worker, num_workers)):
            if self.decode is not None:
                sample["data"] = self._decoded(sample)
            if self.transform is not None:
                sample["data"] = self.transform(sample["data"])
            yield sample

    def _decoded(self, sample: dict):
        """The decoder's value for `sample`; any failure becomes a CorruptDataError naming key and shard."""
        try:
            return self.decode(sample["data"], sample)
        except Exception as exc:
            m, index = self.manifest, sample["index"]
            path, offset = m.shards[int(m.samples.shard[index])].path, int(m.samples.data_offset[index])
            raise CorruptDataError(f"{self.storage.url(path)}: byte offset {offset}: sample {sample['key']!r}: "
                                   f"cannot decode ({plain_message(exc)})", shard=path, offset=offset,
                                   key=sample["key"]) from exc


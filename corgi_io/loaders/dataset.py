"""CorgiPileDataset: a torch IterableDataset that streams a corgi pack with two-level shuffling.

Per epoch: the planning core (`corgi_io.schedule`) orders the blocks, gives every rank
the same number of samples, splits a rank's share among DataLoader workers, and groups
each worker's pieces into shuffle buffers.  `BlockReader` then reads each piece with one
ranged read, ahead of the consumer, and the samples come out in the plan's order.
"""
from __future__ import annotations

import os

import torch

from corgi_io.block_reader import BlockReader
from corgi_io.manifest import open_manifest
from corgi_io.schedule import SHUFFLE_MODES, assign_ranks, buffer_plan, samples_per_rank, split_workers
from corgi_io.storage import StorageError, open_storage

from .decode import get_decoder
from .distributed import rank_and_world, worker_and_count


class CorgiPileDataset(torch.utils.data.IterableDataset):
    """Samples of a pack as dicts ``{"key", "label", "size", "data", "index"}``, CorgiPile-shuffled by default.

    `shuffle`: "corgipile" (block order + buffer shuffle), "block" (block order only),
    "window" (a sliding shuffle buffer holding as many samples as `buffer_blocks` blocks),
    "none", or "full" (per-sample random access, one read per sample).
    `buffer_blocks` pieces form one shuffle buffer; `prefetch_blocks` more are read ahead.
    `decode`: None (bytes), "pil", "rgb", "text" or a callable(data, sample); `transform`
    then maps the decoded data.  Every rank yields exactly `len(self)` samples per epoch.
    """

    def __init__(self, source, *, shuffle: str = "corgipile", buffer_blocks: int = 16, seed: int = 0,
                 rank=None, world_size=None, drop_last: bool = False, decode=None, transform=None,
                 prefetch_blocks: int | None = None, balance: str = "count", batch_size: int | None = None,
                 storage_options: dict | None = None):
        super().__init__()
        if shuffle not in SHUFFLE_MODES:
            raise ValueError(f"shuffle must be one of {SHUFFLE_MODES}, got {shuffle!r}")
        self.manifest = open_manifest(source)
        self.shuffle, self.buffer_blocks, self.seed = shuffle, int(buffer_blocks), int(seed)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.drop_last, self.balance, self.batch_size = drop_last, balance, batch_size
        self.decode, self.transform = get_decoder(decode), transform
        self.prefetch_blocks = self.buffer_blocks if prefetch_blocks is None else int(prefetch_blocks)
        self.storage_options = storage_options or {}
        self.epoch = 0
        self._storage, self._storage_pid = None, None
        self.last_reader = None  # the BlockReader of the latest iteration in this process (for its counters)
        self._check_shards()

    def _check_shards(self) -> None:
        """Fail now, naming the file, rather than in the middle of an epoch."""
        storage = self.storage
        for shard in self.manifest.shards:
            if not storage.exists(shard.path):
                raise StorageError(f"{storage.url(shard.path)}: shard listed in the manifest is missing")

    @property
    def storage(self):
        """This process's Storage (DataLoader workers each open their own)."""
        if self._storage is None or self._storage_pid != os.getpid():
            self._storage = open_storage(self.manifest.root, **self.storage_options)
            self._storage_pid = os.getpid()
        return self._storage

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose block order and shuffles the next iteration uses."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (the same on every rank)."""
        return samples_per_rank(self.manifest.num_samples, self.world_size, self.drop_last)

    def worker_pieces(self, worker: int, num_workers: int):
        """The pieces one DataLoader worker of this rank reads this epoch."""
        m = self.manifest
        ranks = assign_ranks(m.blocks.first, m.blocks.count, self.world_size, seed=self.seed, epoch=self.epoch,
                             balance=self.balance, drop_last=self.drop_last,
                             sizes=m.samples.size if self.balance != "count" else None,
                             shuffle_blocks=self.shuffle != "none")
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
        worker, num_workers = worker_and_count()
        reader = BlockReader(self.manifest, self.storage, self.prefetch_blocks)
        self.last_reader = reader
        for sample in reader.samples(self.plan(worker, num_workers)):
            if self.decode is not None:
                sample["data"] = self.decode(sample["data"], sample)
            if self.transform is not None:
                sample["data"] = self.transform(sample["data"])
            yield sample

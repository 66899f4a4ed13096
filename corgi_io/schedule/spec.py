"""What an epoch plan is a function of: a small frozen `EpochSpec` and the pack's `BlockTable`.

Every rank and every worker builds the same spec from the loader's options; the plan of
``(table, spec)`` (plus the cost model under dynamic balance and the block owners under
partitions) is the same wherever it is computed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corgi_io.arguments import check_at_least, choose
from corgi_io.errors import ArgumentError
from corgi_io.schedule.modes import BALANCES, SHUFFLES


def samples_per_rank(num_samples: int, world_size: int, drop_last: bool = False) -> int:
    """Samples every rank reads in an epoch: ``ceil(N / W)`` when padding,
    ``floor(N / W)`` with ``drop_last`` (0 when N < W: every plan is empty)."""
    if world_size < 1:
        raise ArgumentError(f"world_size must be >= 1, got {world_size}")
    return num_samples // world_size if drop_last else -(-num_samples // world_size)


@dataclass(frozen=True)
class EpochSpec:
    """The options one epoch's plan depends on.

    ``batch_size``: compose size-balanced batches of this many samples inside each CorgiPile
    buffer (``shuffle="corgipile"`` only; see ``buffer_plan``); None keeps buffers plain
    permutations. The loader's size and dynamic balance require it.
    ``window_samples``: the sliding buffer of ``shuffle="window"``.
    ``group_by_size``: length-grouped batches instead of size-balanced ones (``batches.SizeGrouper``).
    """
    world_size: int
    seed: int = 0
    epoch: int = 0
    balance: str = "count"
    drop_last: bool = False
    shuffle: str = "corgipile"
    num_workers: int = 0
    buffer_pieces: int = 16
    window_samples: int | None = None
    batch_size: int | None = None
    group_by_size: bool = False

    def __post_init__(self):
        choose("balance", self.balance, BALANCES)
        shuffle = choose("shuffle", self.shuffle, SHUFFLES)
        for name, least in (("world_size", 1), ("seed", 0), ("epoch", 0), ("num_workers", 0), ("buffer_pieces", 1)):
            check_at_least(name, getattr(self, name), least, optional=False)
        if self.batch_size is not None and (self.batch_size < 1 or not shuffle.composes_batches):
            raise ArgumentError("batch_size composes size-balanced batches inside CorgiPile buffers: it needs "
                                "shuffle='corgipile' and batch_size >= 1")
        if self.group_by_size and self.batch_size is None:
            raise ArgumentError("group_by_size groups the batches of CorgiPile buffers: it needs batch_size")

    @property
    def shuffle_blocks(self) -> bool:
        """Whether the epoch reads blocks in a shuffled order: the baselines "none" and "window" keep the
        stored order."""
        return SHUFFLES[self.shuffle].shuffles_blocks

    def samples_per_rank(self, num_samples: int) -> int:
        """Samples every rank reads in an epoch of ``num_samples`` (see the function)."""
        return samples_per_rank(num_samples, self.world_size, self.drop_last)

    def stream(self, rank: int, worker: int) -> dict:
        """The keywords of ``buffer_plan`` for one worker of one rank (``sizes`` aside)."""
        return dict(shuffle=self.shuffle, buffer_pieces=self.buffer_pieces, seed=self.seed, epoch=self.epoch,
                    rank=rank, worker=worker, window_samples=self.window_samples, batch_size=self.batch_size,
                    group_by_size=self.group_by_size)


@dataclass(frozen=True, eq=False)
class BlockTable:
    """The planner's view of a pack: per block its first sample, sample count and size sum.

    ``sizes`` holds the per-sample sizes as anything that slices like a 1-D integer array (an
    ndarray, a memory map, a lazy reader). The planner reads ``sizes[start:stop]`` only for the
    pieces it cuts out of a block; whole blocks use ``size_sum``. Count balance needs neither.
    """
    first: np.ndarray
    count: np.ndarray
    size_sum: np.ndarray | None = None
    sizes: object = None

    @classmethod
    def from_sizes(cls, first, count, sizes=None) -> "BlockTable":
        """A table over in-memory per-sample ``sizes`` (or none): the block sums are added up here, O(N)."""
        first, count = np.asarray(first, np.int64), np.asarray(count, np.int64)
        if sizes is None:
            return cls(first, count)
        sizes = np.asarray(sizes, np.int64)
        if len(sizes) != count.sum():
            raise ArgumentError(f"sizes has {len(sizes)} entries for {count.sum()} samples")
        sums = np.add.reduceat(sizes, first) if len(sizes) else np.zeros(len(count), np.int64)
        return cls(first, count, np.where(count > 0, sums, 0), sizes)

    @property
    def num_samples(self) -> int:
        return int(self.count.sum())

    def sizes_of(self, pieces: np.ndarray) -> np.ndarray:
        """Size sum of each piece (int64): the block's sum for a whole block, otherwise its samples' sizes."""
        if self.size_sum is None:
            raise ArgumentError("this plan needs sample sizes (size or dynamic balance)")
        pieces = np.asarray(pieces, np.int64).reshape(-1, 3)
        blocks, start, stop = pieces.T
        out = self.size_sum[blocks].copy()
        for i in np.flatnonzero((start != self.first[blocks]) | (stop != self.first[blocks] + self.count[blocks])):
            out[i] = int(self.samples(start[i], stop[i]).sum())
        return out

    def samples(self, start: int, stop: int) -> np.ndarray:
        """Per-sample sizes of ``[start, stop)`` (a range inside one block), as int64."""
        return np.asarray(self.sizes[start:stop], dtype=np.int64)

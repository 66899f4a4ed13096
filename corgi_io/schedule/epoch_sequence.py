"""The epoch sequence, and count balance: rank r reads positions ``[r*n, (r+1)*n)`` of it.

The epoch sequence is the blocks in the epoch's block order, sample after sample, repeated
periodically (position ``p + N`` is position ``p``: that is how padding wraps). Building it
costs O(B); one rank's slice then costs O(log B + its own pieces), so a rank never plans the
others.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corgi_io.schedule.epoch_order import block_order
from corgi_io.schedule.pieces import EMPTY, block_pieces, cut, positions
from corgi_io.schedule.spec import BlockTable, EpochSpec


@dataclass(frozen=True, eq=False)
class EpochSequence:
    """Whole-block pieces in read order, with their start positions (``positions(pieces)``)."""
    pieces: np.ndarray
    starts: np.ndarray

    @classmethod
    def of_blocks(cls, blocks: np.ndarray, table: BlockTable) -> "EpochSequence":
        pieces = block_pieces(blocks, table.first, table.count)
        return cls(pieces, positions(pieces))

    @classmethod
    def of_epoch(cls, table: BlockTable, spec: EpochSpec) -> "EpochSequence":
        """All blocks in the epoch's order (the same on every rank)."""
        return cls.of_blocks(block_order(len(table.count), spec.seed, spec.epoch, spec.shuffle_blocks), table)

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    def cut(self, start: int, stop: int) -> np.ndarray:
        """Pieces of positions ``[start, stop)``, periodically (see ``pieces.cut``)."""
        return cut(self.pieces, start, stop, self.starts) if stop > start else EMPTY.copy()

    def size_before(self, table: BlockTable, points) -> np.ndarray:
        """Size sum of positions ``[0, p)`` for each ``p`` in ``points`` (int64): whole blocks from the
        block sums; the samples of only the block that ``p`` falls in are read."""
        points = np.asarray(points, np.int64)
        whole = np.concatenate(([0], np.cumsum(table.size_sum[self.pieces[:, 0]])))
        lap, rest = np.divmod(points, self.total)
        i = np.searchsorted(self.starts, rest, "right") - 1
        inside = rest - self.starts[i]
        partial = [int(table.samples(a, a + k).sum()) if k else 0 for a, k in zip(self.pieces[i, 1], inside)]
        return lap * whole[-1] + whole[i] + np.array(partial, np.int64)


@dataclass(frozen=True, eq=False)
class CountPlan:
    """Count balance: rank ``r`` reads positions ``[r*n, (r+1)*n)`` of ``sequence``."""
    sequence: EpochSequence
    n: int

    world_size: int

    def rank(self, rank: int) -> np.ndarray:
        return self.sequence.cut(rank * self.n, (rank + 1) * self.n)

    def ranks(self) -> list[np.ndarray]:
        return [self.rank(r) for r in range(self.world_size)]

    def rank_sizes(self, table: BlockTable) -> np.ndarray:
        """Every rank's size sum, reading the samples of only the W + 1 blocks the slices' ends fall in."""
        return np.diff(self.sequence.size_before(table, np.arange(self.world_size + 1) * self.n))

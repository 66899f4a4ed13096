"""Partitions: each rank reads only the blocks it owns (node-local data), still exactly ``n`` samples.

Rank r takes ``n`` consecutive positions of its own periodic sequence (its blocks in epoch
order) from an offset: 0 under count balance; under the size modes, the offset whose window
size is closest to the rank's budget, unless that window is predicted slower than the slowest
rank's count window (then 0), so the plan is never slower than count balance. A rank's plan
costs O(B) plus its own samples' sizes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corgi_io.errors import ArgumentError

from corgi_io.schedule.cost import slowest_time
from corgi_io.schedule.epoch_order import block_order
from corgi_io.schedule.epoch_sequence import EpochSequence
from corgi_io.schedule.spec import BlockTable, EpochSpec


@dataclass(frozen=True, eq=False)
class PartitionPlan:
    """Rank r's blocks are ``grouped[bounds[r]:bounds[r + 1]]`` (epoch order); ``budgets`` is None
    under count balance; ``threshold`` is the slowest count window's predicted time."""
    table: BlockTable
    grouped: np.ndarray
    bounds: np.ndarray
    n: int
    budgets: np.ndarray | None
    cost: np.ndarray
    threshold: float

    def ranks(self) -> list[np.ndarray]:
        return [self.rank(r) for r in range(len(self.bounds) - 1)]

    def own(self, rank: int) -> EpochSequence:
        return EpochSequence.of_blocks(self.grouped[self.bounds[rank]:self.bounds[rank + 1]], self.table)

    def rank(self, rank: int) -> np.ndarray:
        sequence = self.own(rank)
        if self.budgets is None or self.n == 0:
            return sequence.cut(0, self.n)
        sizes = np.concatenate([self.table.samples(a, z) for _, a, z in sequence.pieces.tolist()])
        laps, rest = divmod(self.n, len(sizes))
        ring = np.concatenate(([0], np.cumsum(np.concatenate((sizes, sizes)))))
        window = laps * ring[len(sizes)] + ring[np.arange(len(sizes)) + rest] - ring[:len(sizes)]
        offset = int(np.argmin(np.abs(window - self.budgets[rank])))
        if self.cost[rank, 0] * window[offset] + self.cost[rank, 1] * self.n > self.threshold:
            offset = 0
        return sequence.cut(offset, offset + self.n)


def block_owners(partitions: dict, shard_paths, block_shard) -> np.ndarray:
    """One owning rank per block (int64), from `partitions` {rank: [shard paths]}, the pack's `shard_paths` and
    each block's shard index: the `owner` of ``partition_plan``.  ArgumentError when a shard is given to two
    ranks or to none, so that every sample has exactly one reader."""
    owner_of_shard = {}
    for rank, paths in partitions.items():
        for path in paths:
            if path in owner_of_shard:
                raise ArgumentError(f"partitions: shard {path!r} is given to ranks {owner_of_shard[path]} "
                                    f"and {rank}")
            owner_of_shard[path] = int(rank)
    missing = [path for path in shard_paths if path not in owner_of_shard]
    if missing:
        raise ArgumentError(f"partitions: shard {missing[0]!r} (and {len(missing) - 1} more) belongs to no rank")
    shard_owner = np.array([owner_of_shard[path] for path in shard_paths], dtype=np.int64)
    return shard_owner[np.asarray(block_shard, dtype=np.int64)]


def partition_plan(table: BlockTable, spec: EpochSpec, owner, budgets_for, cost: np.ndarray) -> PartitionPlan:
    """The plan where rank r reads only blocks with ``owner == r``. ``n`` is the largest partition's
    count (padding repeats the rank's own samples) or, with ``drop_last``, the smallest one's.
    ``budgets_for(total, n)`` gives the size budgets (the size modes)."""
    w = spec.world_size
    owner = np.asarray(owner, np.int64)
    if owner.shape != table.count.shape or owner.min(initial=0) < 0 or owner.max(initial=0) >= w:
        raise ArgumentError(f"partitions must give each of {len(table.count)} blocks a rank in [0, {w})")
    have = np.bincount(owner, weights=table.count, minlength=w).astype(np.int64)
    n = int(have.min() if spec.drop_last else have.max())
    if n and (have == 0).any():
        raise ArgumentError(f"ranks {np.flatnonzero(have == 0).tolist()} own no samples and cannot pad")
    order = block_order(len(table.count), spec.seed, spec.epoch, spec.shuffle_blocks)
    grouped = order[np.argsort(owner[order], kind="stable")]
    bounds = np.searchsorted(owner[grouped], np.arange(w + 1))
    plan = PartitionPlan(table, grouped, bounds, n, None, cost, np.inf)
    if spec.balance == "count" or n == 0:
        return plan
    totals = np.bincount(owner, weights=table.size_sum, minlength=w)
    budgets = budgets_for(float((totals * n / have).sum()), n)
    by_count = [plan.own(r).size_before(table, [n])[0] for r in range(w)]
    return PartitionPlan(table, grouped, bounds, n, budgets, cost, slowest_time(by_count, np.full(w, n), cost))

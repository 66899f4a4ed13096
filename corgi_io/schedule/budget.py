"""Budgeted batches: one shuffle buffer's samples cut into batches whose *cost* stays within a budget.

`Budget(T)` (the loader's `batching=`) replaces a fixed batch size for data whose samples differ in size
(tokens, frames, pixels).  How a batch costs is a model from the registry `BATCH_COSTS`:

- ``"padded"``: ``n * max(size)``, what a padded batch costs a model without varlen attention.  The
  buffer's samples are sorted by size and cut into runs (each batch holds samples of similar size, so
  padding wastes little), the runs' common cap as low as the batch count allows;
- ``"sum"``: ``sum(size)``, what packed or varlen batches cost.  The samples, largest first, are each
  dealt to the lightest batch so far (LPT): every batch gets a spread of sizes, and the
  sums come out nearly equal.

A sample whose cost alone exceeds the budget is a batch of its own (its cost is its size), never an
error: a long document is rare and still has to be trained on; docs/algorithms.md says so.

Each model answers two questions of a buffer's sizes: `fewest` (the least batch count within the
budget) and `cut` (exactly `count` batches, count >= fewest, within the budget, costs balanced).
Pure numpy: no I/O, no torch.  A buffer of n samples in m batches costs O(n log n) numpy work plus
O(m) Python steps per trial (``"padded"`` bisects the cap: about log2(T) trials).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from corgi_io.arguments import check_at_least, choose
from corgi_io.errors import CorgiError


def padded_cost(sizes: np.ndarray) -> int:
    """What a batch of these sizes costs padded to its longest: ``n * max``."""
    return int(len(sizes) * sizes.max()) if len(sizes) else 0


def sum_cost(sizes: np.ndarray) -> int:
    """What a packed (varlen) batch of these sizes costs: their sum."""
    return int(np.sum(sizes, dtype=np.int64))


def _runs(desc: list, cap: int) -> list:
    """Where each batch starts when `desc` (sizes, largest first) is cut greedily into runs of padded cost
    <= cap: a run starting at a sample of size s holds ``cap // s`` samples (at least 1).  Greedy is the
    fewest runs for that cap, since a run's feasibility only improves as it moves to smaller sizes."""
    starts, i, n = [], 0, len(desc)
    while i < n:
        starts.append(i)
        i += max(1, cap // max(desc[i], 1))
    return starts


def _split_largest(bounds: list, count: int) -> list:
    """Run boundaries (starts plus the end) with runs split, the one with most samples first, until there
    are `count` runs (the caller has at least `count` samples)."""
    bounds = list(bounds)
    while len(bounds) - 1 < count:
        widths = np.diff(bounds)
        j = int(np.argmax(widths))
        bounds.insert(j + 1, bounds[j] + int(widths[j]) // 2)
    return bounds


class PaddedBatches:
    """``Budget(T, cost="padded")``: size-sorted runs of cost ``n * max`` (see the module docstring)."""

    cost = staticmethod(padded_cost)

    @staticmethod
    def fewest(sizes: np.ndarray, budget: int) -> int:
        """The fewest padded batches within `budget` (greedy runs of the sizes, largest first)."""
        return len(_runs(np.sort(sizes)[::-1].tolist(), budget))

    @staticmethod
    def cut(sizes: np.ndarray, budget: int, count: int) -> list:
        """Exactly `count` runs of the positions of `sizes` (largest first), each of padded cost <= the
        lowest cap that `count` runs allow (<= `budget` unless one sample alone exceeds it)."""
        order = np.argsort(-sizes, kind="stable")
        desc = sizes[order].tolist()
        lo, hi = 1, max(budget, max(desc, default=1))
        while lo < hi:  # the lowest cap whose greedy runs number at most `count`
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if len(_runs(desc, mid)) <= count else (mid + 1, hi)
        bounds = _split_largest(_runs(desc, lo) + [len(desc)], count)
        return [order[a:z] for a, z in zip(bounds, bounds[1:])]


def _deal_lightest(desc: np.ndarray, count: int) -> tuple:
    """(batch of each position, batch sums): sizes `desc` (largest first) each dealt to the lightest batch so
    far (LPT: the sums end within about one of the last, smallest, sizes of each other).  O(n log count), a
    heap step per sample."""
    heap = [(0, b) for b in range(count)]
    owner = np.empty(len(desc), np.int64)
    for i, size in enumerate(desc.tolist()):
        total, b = heap[0]
        heapq.heapreplace(heap, (total + size, b))
        owner[i] = b
    sums = np.zeros(count, np.int64)
    for total, b in heap:
        sums[b] = total
    return owner, sums


def _halve_fullest(owner: np.ndarray, count: int) -> np.ndarray:
    """`owner` (a batch number per position) with the batch of most members split in two, repeatedly,
    until there are `count` batches (new numbers appended)."""
    owner = owner.copy()
    for new in range(int(owner.max()) + 1, count):
        members = np.flatnonzero(owner == np.argmax(np.bincount(owner)))
        owner[members[len(members) // 2:]] = new
    return owner


class SumBatches:
    """``Budget(T, cost="sum")``: batches of sum <= budget, dealt largest first to the lightest batch (see the
    module)."""

    cost = staticmethod(sum_cost)

    @staticmethod
    def fewest(sizes: np.ndarray, budget: int) -> int:
        """The fewest batches of sum <= `budget` that dealing to the lightest finds (each oversized sample alone)."""
        heavy = sizes > budget
        rest = np.sort(sizes[~heavy])[::-1]
        if not len(rest):
            return int(heavy.sum())
        count = max(1, -(-int(rest.sum()) // budget))
        while _deal_lightest(rest, count)[1].max() > budget:
            count += 1
        return int(heavy.sum()) + count

    @classmethod
    def cut(cls, sizes: np.ndarray, budget: int, count: int) -> list:
        """Exactly `count` batches of the positions of `sizes`: each oversized sample alone, the rest dealt
        to the lightest of the others.  Should dealing into that many overshoot (more batches need not mean
        lower sums for a greedy deal), the rest is dealt into the fewest batches that fit instead and the
        fullest of those halved until there are `count`: halves of a batch within budget stay within it."""
        order = np.argsort(-sizes, kind="stable")
        heavy = int((sizes > budget).sum())
        rest = order[heavy:]
        batches = [order[i:i + 1] for i in range(heavy)]
        if not len(rest):
            return batches
        owner, sums = _deal_lightest(sizes[rest], count - heavy)
        if sums.max() > budget:
            owner, _ = _deal_lightest(sizes[rest], cls.fewest(sizes, budget) - heavy)
            owner = _halve_fullest(owner, count - heavy)
        return batches + [rest[owner == b] for b in range(count - heavy)]


BATCH_COSTS = {"padded": PaddedBatches, "sum": SumBatches}


@dataclass(frozen=True)
class BatchBudget:
    """A budget (`Budget(T, cost=)`'s limit and cost), checked: batches of cost <= `limit` under the model `cost`."""

    limit: int
    cost: str = "padded"

    def __post_init__(self):
        object.__setattr__(self, "limit", check_at_least("batch_budget", self.limit, 1, optional=False))
        choose("batch_cost", self.cost, BATCH_COSTS)

    @property
    def model(self):
        return BATCH_COSTS[self.cost]

    def fewest(self, sizes: np.ndarray) -> int:
        """The fewest batches a buffer of these sizes needs within the budget."""
        return self.model.fewest(np.asarray(sizes, np.int64), self.limit)

    def cut(self, ids: np.ndarray, sizes: np.ndarray, count: int, rng: np.random.Generator) -> list:
        """A buffer's `ids` (with their `sizes`) as exactly `count` batches within the budget, costs balanced,
        in the model's order (``"padded"``: largest samples first), each batch's members shuffled by `rng`.
        CorgiError when `count` is not in [fewest, len(ids)]."""
        sizes = np.asarray(sizes, np.int64)
        if not self.fewest(sizes) <= count <= len(ids):
            raise CorgiError(f"budget plan: {len(ids)} samples cannot make {count} batches within {self.limit}")
        return [rng.permutation(ids[batch]) for batch in self.model.cut(sizes, self.limit, count)]


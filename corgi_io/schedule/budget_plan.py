"""One epoch of budgeted batches (`Budget(T)`) as a pure planner, a `SamplePlanner`.

Ranks get their samples as without a budget (equal counts; equal size sums under size balance), and
each rank's pieces form CorgiPile buffers as if the rank had one worker.  Each buffer is cut into
batches within the budget (`budget.BatchBudget`).  Every rank must take the same number of steps, so
the step count M is the largest of the ranks' fewest batch counts, and a rank below it spreads the
missing batches over its buffers (in proportion to their counts), cutting them into more, lighter
batches: costs fall a little, none rises, and no sample moves to another rank.  M is a function of
the whole epoch, so every rank computes every rank's fewest counts: O(N log N) numpy work per rank
and epoch, over the sizes column, never O(W * N).  The batches do not depend on the worker count,
so ``len()`` is exact in the main process; worker k of K takes a run of whole buffers holding about
M / K batches (the DataLoader's round robin then takes M steps in all).

The plan lists one batch per item: a buffer's first batch carries the buffer's pieces, the others
none (their samples were read with it), so resume (`corgi_io.schedule.resume`) cuts plans at batch
boundaries unchanged, and the loader reads the batch sizes off the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from corgi_io.schedule.budget import BatchBudget
from corgi_io.schedule.epoch import EpochPlanner
from corgi_io.schedule.epoch_order import BUDGET, epoch_rng
from corgi_io.schedule.pieces import EMPTY, piece_counts
from corgi_io.schedule.modes import BALANCES
from corgi_io.schedule.planner import SamplePlanner
from corgi_io.schedule.resume import resumed_plan
from corgi_io.schedule.stream import buffer_plan, even_buffers

MEMBERS, REGROUP, ORDER = range(3)  # the BUDGET stream's parts: batch members, buffers (per rank); step keys (shared)


def spread(extra: int, weights: np.ndarray, room: np.ndarray) -> np.ndarray:
    """`extra` units over entries in proportion to `weights` (largest remainders), none beyond its `room`
    (whose sum must reach `extra`)."""
    weights = np.asarray(weights, np.float64)
    ideal = extra * weights / max(weights.sum(), 1.0)
    give = np.minimum(np.floor(ideal).astype(np.int64), room)
    while (left := extra - int(give.sum())) > 0:
        open_ = np.flatnonzero(give < room)
        give[open_[np.argsort(give[open_] - ideal[open_], kind="stable")[:left]]] += 1
    return give


@dataclass(frozen=True, eq=False)
class BudgetPlanner(SamplePlanner):
    """The plans of one epoch of budgeted batches: `base` plans the ranks' samples (no batch size), `budget`
    cuts each rank's buffers.  ``cache`` keeps the step count and each rank's batches once computed."""

    counts_items = True  # resume counts plan items (batches of varying size), not samples

    base: EpochPlanner
    budget: BatchBudget
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def table(self):
        return self.base.table

    @property
    def spec(self):
        return self.base.spec

    @property
    def cost_model(self):
        return self.base.cost_model

    def for_world(self, world_size: int, runs: np.ndarray | None = None) -> "BudgetPlanner":
        """The same epoch (or, given `runs`, that remainder of it) for `world_size` ranks, cut anew."""
        base = self.base.for_world(world_size, runs)
        return self if base is self.base else replace(self, base=base, cache={})

    def sequence(self) -> np.ndarray:
        return self.base.sequence()

    def rank_pieces(self, rank: int) -> np.ndarray:
        return self.base.rank_pieces(rank)

    def _buffers(self, rank: int, pieces: np.ndarray) -> list:
        """A rank's CorgiPile buffers as if it had one worker: [(pieces, sample ids in shuffled order)].  Under
        a size balance the pieces are first regrouped into buffers of even density (`even_buffers`), so that
        buffer j holds about the same size on every rank, and equal batch counts mean equal costs."""
        spec = self.spec
        if BALANCES[spec.balance].by_size and len(pieces):
            rng = epoch_rng(spec.seed, spec.epoch, BUDGET, REGROUP, rank)
            pieces = even_buffers(pieces, self.table.sizes_of(pieces), spec.buffer_pieces, rng)
        return list(buffer_plan(pieces, sizes=self.table.sizes, **spec.stream(rank, 0)))

    def _fewest(self, buffers: list) -> np.ndarray:
        """Each buffer's fewest batches within the budget."""
        return np.array([self.budget.fewest(self.table.sizes[ids]) for _, ids in buffers], np.int64)

    def steps(self) -> int:
        """M: the batches every rank yields per epoch, the most any rank's buffers need (at most a rank's
        samples).  Every rank computes every rank's fewest counts: O(N log N), once per epoch."""
        if "steps" not in self.cache:
            need = [int(self._fewest(self._buffers(rank, pieces)).sum())
                    for rank, pieces in enumerate(self.base.every_rank_pieces())]
            samples = min(int(piece_counts(pieces).sum()) for pieces in self.base.every_rank_pieces())
            self.cache["steps"] = min(max(need, default=0), samples)
        return self.cache["steps"]

    def rank_batches(self, rank: int) -> list:
        """Rank `rank`'s buffers as [(pieces, [batch ids, ...] in step order)], `steps()` batches in all (kept):
        the batches a rank lacks are spread over its buffers in proportion to their counts."""
        if rank not in self.cache:
            steps = self.steps()
            buffers = self._buffers(rank, self.rank_pieces(rank))
            fewest = self._fewest(buffers)
            room = np.array([len(ids) for _, ids in buffers], np.int64) - fewest
            counts = fewest + spread(steps - int(fewest.sum()), fewest, room)
            keys = epoch_rng(self.spec.seed, self.spec.epoch, BUDGET, ORDER).random(steps)
            ends = np.cumsum(counts).tolist()
            self.cache[rank] = [(pieces, self._cut(rank, j, ids, keys[end - count:end]))
                                for j, ((pieces, ids), count, end) in enumerate(zip(buffers, counts.tolist(), ends))]
        return self.cache[rank]

    def _cut(self, rank: int, j: int, ids: np.ndarray, keys: np.ndarray) -> list:
        """Buffer j of `rank` cut into ``len(keys)`` batches; the step with the k-th smallest key takes the k-th
        batch in the model's order.  The keys are the steps' own, drawn alike on every rank, so at each step
        every rank yields a batch of about the same quantile of its buffer (the same kind of cost), even where
        the ranks' buffers begin a few steps apart."""
        spec = self.spec
        batches = self.budget.cut(ids, self.table.sizes[ids], len(keys),
                                  epoch_rng(spec.seed, spec.epoch, BUDGET, MEMBERS, rank, j))
        return [batches[q] for q in np.argsort(np.argsort(keys, kind="stable"), kind="stable").tolist()]

    def _worker_buffers(self, rank: int, worker: int, num_workers: int) -> list:
        """The run of a rank's buffers worker `worker` of K takes: those whose middle batch falls in its
        K-th of the rank's batches (a worker may get none when buffers are fewer than workers)."""
        buffers, k = self.rank_batches(rank), max(1, num_workers)
        counts = np.array([len(batches) for _, batches in buffers], np.int64)
        middle = np.cumsum(counts) - counts / 2
        owner = np.minimum((middle * k) // max(int(counts.sum()), 1), k - 1).astype(np.int64)
        return [buffer for buffer, who in zip(buffers, owner.tolist()) if who == worker]

    def worker_pieces(self, rank: int, worker: int, num_workers: int) -> np.ndarray:
        """The pieces one of a rank's `num_workers` DataLoader workers reads: its buffers'."""
        return np.concatenate([EMPTY, *(pieces for pieces, _ in self._worker_buffers(rank, worker, num_workers))])

    def plan(self, rank: int, worker: int, num_workers: int):
        """One worker's plan, a batch per item: (the buffer's pieces with its first batch, else none; batch ids)."""
        for pieces, batches in self._worker_buffers(rank, worker, num_workers):
            for j, batch in enumerate(batches):
                yield (pieces if j == 0 else EMPTY), batch

    def rank_items(self, rank: int) -> int:
        """The batches every rank yields per epoch (`steps`)."""
        return self.steps()

    resumed_plan = resumed_plan  # `corgi_io.schedule.resume.resumed_plan`, this planner its first argument

    def portable(self) -> None:
        """None: a copy of the dataset plans its batches anew."""
        return None

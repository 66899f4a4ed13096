"""Size-balanced placement of pieces on ranks with exactly equal sample counts.

Used by ``plan_epoch`` for ``balance="size"`` (equal size budgets) and
``balance="dynamic"`` (budgets that equalise predicted time). Every rank computes
the same placement, from the block-level size sums; per-sample sizes are read
only where a piece is cut. The algorithm is in docs/algorithms.md; in short:

1. deal (here): whole units in epoch order, one per rank and round; in each
   round the hungriest rank (most remaining budget per remaining sample) gets
   the round's densest unit, and so on down. The tail of the epoch sequence,
   ``RESERVE`` mean units per rank, is kept back for the fill;
2. fill (``fill.py``): the kept-back and undealt units fill the remaining
   rooms exactly, rank by rank, with windows aimed at each rank's budget;
3. refine (``refine.py``): window swaps between the slowest and the fastest
   rank while the slowest is predicted more than 0.5 % above the ideal;
4. the count plan is kept instead when it is predicted faster (``keep_if_faster``).

Placement rows are int64 ``(rank, unit, block, start, stop, size)``: ``unit`` is
the piece's position in the epoch sequence, so sorting by it restores read order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corgi_io.errors import ArgumentError

from corgi_io.schedule.cost import keep_if_faster
from corgi_io.schedule.fill import fill
from corgi_io.schedule.pieces import merge_adjacent, piece_counts
from corgi_io.schedule.refine import refine
from corgi_io.schedule.epoch_sequence import CountPlan
from corgi_io.schedule.spec import BlockTable

RESERVE = 2  # mean units of room per rank kept back from the deal for the fill
EXTRA_READS = 8  # per rank, on average: the most pieces the fill and refine may add to the units


def rank_budgets(total_size: float, n: int, cost_model: np.ndarray | None,
                 world_size: int) -> np.ndarray:
    """Per-rank size budgets (float64[W]) summing to ``total_size``.

    Without a cost model every rank gets ``total_size / W``. With ``cost_model``
    rows ``(a_r, b_r)`` (rank r's time ~ a_r * size + b_r * samples), every rank
    gets ``n`` samples, so the budgets solve ``a_r * B_r + b_r * n = T`` with
    ``sum B_r = total_size``; a rank whose fixed cost alone exceeds ``T`` gets
    budget 0 and ``T`` is re-solved over the others (water-filling).
    """
    if cost_model is None:
        return np.full(world_size, total_size / world_size)
    cm = np.asarray(cost_model, dtype=np.float64)
    if cm.shape != (world_size, 2) or (cm[:, 0] <= 0).any() or (cm[:, 1] < 0).any():
        raise ArgumentError(f"cost_model must be ({world_size}, 2) with a > 0 and b >= 0")
    a, fixed = cm[:, 0], cm[:, 1] * n
    live = np.ones(world_size, bool)
    while True:
        t = (total_size + (fixed[live] / a[live]).sum()) / (1 / a[live]).sum()
        budgets = np.where(live, (t - fixed) / a, 0.0)
        if (budgets >= 0).all():
            return budgets
        live &= budgets > 0


@dataclass(frozen=True, eq=False)
class PlacedPlan:
    """A placement: rows ``(rank, unit, block, start, stop, size)``."""
    rows: np.ndarray
    world_size: int

    def rank(self, rank: int) -> np.ndarray:
        """The rank's pieces in epoch-sequence order, adjacent pieces of a block merged."""
        return _in_read_order(self.rows[self.rows[:, 0] == rank])

    def ranks(self) -> list[np.ndarray]:
        """Every rank's pieces (one sort of all rows instead of one pass per rank)."""
        rows = self.rows[np.argsort(self.rows[:, 0], kind="stable")]
        bounds = np.searchsorted(rows[:, 0], np.arange(self.world_size + 1))
        return [_in_read_order(rows[a:z]) for a, z in zip(bounds[:-1], bounds[1:])]


def _in_read_order(rows: np.ndarray) -> np.ndarray:
    return merge_adjacent(rows[np.lexsort((rows[:, 3], rows[:, 1])), 2:5])


def size_plan(table: BlockTable, by_count: CountPlan, budgets_for, cost: np.ndarray,
              tiebreak: np.ndarray) -> PlacedPlan | CountPlan:
    """The size-balanced plan of the units ``by_count`` covers (the first ``W * n`` positions of the
    epoch sequence), or ``by_count`` itself when that is predicted faster. ``budgets_for(total, n)``
    gives the per-rank size budgets; ``tiebreak`` (a permutation of the ranks) orders equal ranks."""
    w, n = by_count.world_size, by_count.n
    units = by_count.sequence.cut(0, w * n)
    count, size = piece_counts(units), table.sizes_of(units)
    budgets = budgets_for(float(size.sum()), n)
    reserve = min(n // 2, int(RESERVE * count.mean()))
    kept_back = int(np.searchsorted(np.cumsum(count[::-1]), w * reserve)) + 1  # units, for the fill
    owner, load, room = _deal(count, size, max(len(count) - kept_back, 0), n, budgets, tiebreak, reserve // 2)
    dealt = np.flatnonzero(owner >= 0)
    rows = np.concatenate([np.column_stack((owner[dealt], dealt, units[dealt], size[dealt])),
                           fill(units, size, np.flatnonzero(owner < 0), room, load, budgets, table, tiebreak)])
    rows = refine(rows, load, budgets, cost, n, table, max_rows=len(units) + EXTRA_READS * w)
    if not keep_if_faster(load, by_count.rank_sizes(table), np.full(w, n), cost):
        return by_count
    return PlacedPlan(rows, w)


def _deal(count, size, dealt, n, budgets, tiebreak, keep):
    """Step 1: deal the first ``dealt`` units, one per rank and round; a unit that would leave its rank
    less than ``keep`` samples of room or take it over budget is left to the fill (which can cut it).
    Returns each unit's rank (-1: left to the fill) and the ranks' loads and rooms."""
    w = len(budgets)
    owner, room, load = np.full(len(count), -1, np.int64), np.full(w, n, np.int64), np.zeros(w)
    density = size / np.maximum(count, 1)
    done = 0
    while done < dealt and (room > keep).any():
        active = np.flatnonzero(room > keep)
        batch = np.arange(done, min(done + len(active), dealt))
        done += len(batch)
        want = (budgets[active] - load[active]) / room[active]
        ranks = active[np.lexsort((tiebreak[active], -want))][:len(batch)]
        units = batch[np.argsort(-density[batch], kind="stable")]
        fits = (count[units] <= room[ranks] - keep) & (size[units] <= budgets[ranks] - load[ranks])
        ranks, units = ranks[fits], units[fits]
        owner[units] = ranks
        room[ranks] -= count[units]
        load[ranks] += size[units]
    return owner, load, room

"""Size-balanced placement of pieces on ranks with exactly equal sample counts.

Used by ``plan_epoch`` for ``balance="size"`` (equal size budgets) and
``balance="dynamic"`` (budgets that equalise predicted time). Every rank computes
the same placement from block-level size sums; per-sample sizes are read only
for the blocks the placement cuts. The algorithm is in docs/algorithms.md; in short:

1. deal: the units (blocks, in epoch order) are dealt in rounds, one per rank
   and round; in each round the hungriest rank (most remaining budget per
   remaining sample) gets the round's densest unit, and so on down;
2. fill: units that did not fit whole fill the remaining rooms, rank by rank:
   the unit whose density is closest to the rank's remaining need, whole while
   it fits, then the window of it (per-sample sizes of that block) whose size
   comes closest to what the rank still needs;
3. refine: while the slowest rank is predicted more than 0.5% above the ideal,
   it swaps two equal-length windows with the fastest rank: from its densest
   piece and the other's sparsest, sized to move the difference (``refine.py``);
4. the count plan is kept instead when it is predicted faster (``keep_if_faster``).

Placement rows are int64 ``(rank, unit, block, start, stop, size)``: ``unit`` is
the piece's position in the epoch sequence, so sorting by it restores read order.
"""
from __future__ import annotations

import bisect

from dataclasses import dataclass

import numpy as np

from .cost import keep_if_faster
from .pieces import merge_adjacent, piece_counts
from .refine import refine, window_sums
from .sequence import CountPlan
from .spec import BlockTable

RANK, UNIT, SIZE = 0, 1, 5  # placement row columns; (block, start, stop) are 2:5
RESERVE = 2  # mean units of room each rank keeps for the fill
SIZE_CLASSES = 8  # the deal goes through the units by size class, largest first
FILL_TOLERANCE = 1e-4  # a fill window within this fraction of the rank's budget is taken as it is
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
        raise ValueError(f"cost_model must be ({world_size}, 2) with a > 0 and b >= 0")
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
    """A placement: rows ``(rank, unit, block, start, stop)`` sorted by rank, then read order."""
    rows: np.ndarray

    def rank(self, rank: int) -> np.ndarray:
        """The rank's pieces in epoch-sequence order, adjacent pieces of a block merged."""
        lo, hi = np.searchsorted(self.rows[:, RANK], [rank, rank + 1])
        return merge_adjacent(self.rows[lo:hi, 2:5].copy())


def size_plan(table: BlockTable, by_count: CountPlan, budgets_for, cost: np.ndarray,
              tiebreak: np.ndarray) -> PlacedPlan | CountPlan:
    """The size-balanced plan of the units ``by_count`` covers (the first ``W * n`` positions of the
    epoch sequence), or ``by_count`` itself when that is predicted faster. ``budgets_for(total, n)``
    gives the per-rank size budgets; ``tiebreak`` (a permutation of the ranks) orders equal ranks."""
    w, n = len(tiebreak), by_count.n
    units = by_count.sequence.cut(0, w * n)
    count, size = piece_counts(units), table.sizes_of(units)
    budgets = budgets_for(float(size.sum()), n)
    reserve = min(n // 2, int(RESERVE * count.mean()))
    owner, load, room = _deal(count, size, _dealing_order(count, size, w, reserve), n, budgets, tiebreak,
                              reserve // 2)
    dealt = np.flatnonzero(owner >= 0)
    rows = np.concatenate([np.column_stack((owner[dealt], dealt, units[dealt], size[dealt])),
                           _fill(units, size, np.flatnonzero(owner < 0), room, load, budgets, table, tiebreak)])
    rows = refine(rows, load, budgets, cost, n, table, max_rows=len(units) + EXTRA_READS * w)
    if not keep_if_faster(load, by_count.rank_sizes(table, w), np.full(w, n), cost):
        return by_count
    return PlacedPlan(rows[np.lexsort((rows[:, 3], rows[:, UNIT], rows[:, RANK])), :5])


def _dealing_order(count: np.ndarray, size: np.ndarray, w: int, reserve: int) -> np.ndarray:
    """The units to deal, in dealing order: all but the tail of the epoch sequence that holds
    ``W * reserve`` samples (left to the fill: a random mix of densities), the largest of
    ``SIZE_CLASSES`` size classes first (big units early, small ones last, as in LPT scheduling),
    epoch order within a class (so the epoch still decides which units meet)."""
    dealt = np.arange(max(len(count) - int(np.searchsorted(np.cumsum(count[::-1]), w * reserve)) - 1, 0))
    edges = np.quantile(size[dealt], np.linspace(0, 1, SIZE_CLASSES + 1)[1:-1]) if len(dealt) else []
    return dealt[np.argsort(-np.searchsorted(edges, size[dealt], side="right"), kind="stable")]


def _deal(count, size, order, n, budgets, tiebreak, keep):
    """Step 1: deal the units ``order`` lists, one per rank and round; a unit that would leave its rank
    less than ``keep`` samples of room or take it over budget is left to the fill (which can cut it).
    Returns each unit's rank (-1: left to the fill) and the ranks' loads and rooms."""
    w = len(budgets)
    owner, room, load = np.full(len(count), -1, np.int64), np.full(w, n, np.int64), np.zeros(w)
    density = size / np.maximum(count, 1)
    done = 0
    while done < len(order) and (room > keep).any():
        active = np.flatnonzero(room > keep)
        batch = order[done:done + len(active)]
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


def _fill(units, size, left, room, load, budgets, table, tiebreak):
    """Step 2: the ``left`` units fill the rooms exactly (``load`` is updated); placement rows. A rank
    cuts at most two pieces (a split window, then its last one)."""
    pool = _Pool(np.column_stack((left, units[left], size[left])))
    order = _hardest_first(room, load, budgets, tiebreak)
    owed, rows = float((budgets[order] - load[order]).sum()), []
    for r in order:
        # the rank's share of what the pool holds: errors of earlier ranks spread, not pile up on the last
        need, budget = int(room[r]), (budgets[r] - load[r]) * pool.size / owed if owed > 0 else 0.0
        owed -= budgets[r] - load[r]
        tolerance = FILL_TOLERANCE * budgets[r]
        while need:
            u, block, a, z, s = pool.take(budget / need)
            if z - a > need:
                a, z, s = _window(pool, table, (u, block, a, z), need, budget, tolerance)
                tolerance = np.inf  # the next cut is the rank's last: no second split
            rows.append((r, u, block, a, z, s))
            need -= z - a
            budget -= s
            load[r] += s
    return np.array(rows, np.int64).reshape(-1, 6)


def _window(pool, table, piece, need: int, budget: float, tolerance: float) -> tuple[int, int, int]:
    """``(start, stop, size)`` of the part of ``piece`` (more than ``need`` samples) a rank takes; the
    rest goes back to ``pool``. That is the window of ``need`` samples whose size is closest to
    ``budget`` or, when it misses by more than ``tolerance``, a shorter one: sized so that the rest of
    the need, at the density of the nearest piece on the other side of the target, makes up the
    budget (the rank's next take is that piece)."""
    unit, block, a, z = piece
    sizes = table.samples(a, z)
    k, o, miss = _closest_window(sizes, need, budget, tolerance)
    density = sizes.sum() / len(sizes)
    other = pool.beyond(budget / need, density)
    if miss > tolerance and need > 1 and other is not None and other != density:
        k = int(np.clip(round((budget - need * other) / (density - other)), 1, need - 1))
        k, o, miss = _closest_window(sizes, k, budget - (need - k) * other, tolerance)
    pool.put(unit, block, a, a + o, int(sizes[:o].sum()))
    pool.put(unit, block, a + o + k, z, int(sizes[o + k:].sum()))
    return a + o, a + o + k, int(sizes[o:o + k].sum())


def _closest_window(sizes: np.ndarray, k: int, aim: float, tolerance: float) -> tuple[int, int, float]:
    """``(k, offset, miss)`` of the window of ``k`` samples whose size is closest to ``aim``; a window at
    either end is preferred when it is within ``tolerance`` (cutting it leaves one piece, not two)."""
    miss = np.abs(window_sums(sizes, k) - aim)
    o = int(np.argmin(miss))
    end = 0 if miss[0] <= miss[-1] else len(miss) - 1
    if miss[end] <= max(tolerance, miss[o]):
        o = end
    return k, o, float(miss[o])


class _Pool:
    """Pieces ``(unit, block, start, stop, size)`` waiting for the fill, kept sorted by density (size per
    sample); ``size`` is their total."""

    def __init__(self, items: np.ndarray):
        self.items = sorted((s / (z - a), u, b, a, z, s) for u, b, a, z, s in items.tolist())
        self.keys = [item[0] for item in self.items]
        self.size = int(items[:, 4].sum())

    def take(self, density: float) -> tuple:
        """Remove and return the piece whose density is closest to ``density``."""
        j = bisect.bisect_left(self.keys, density)
        if j == len(self.keys) or (j > 0 and density - self.keys[j - 1] <= self.keys[j] - density):
            j -= 1
        self.keys.pop(j)
        item = self.items.pop(j)
        self.size -= item[5]
        return item[1:]

    def beyond(self, target: float, density: float) -> float | None:
        """The density closest to ``target`` on the other side of it from ``density``, if any."""
        j = bisect.bisect_left(self.keys, target)
        if density > target:
            return self.keys[j - 1] if j > 0 else None
        return self.keys[j] if j < len(self.keys) else None

    def put(self, unit: int, block: int, start: int, stop: int, size: int) -> None:
        """Add the rest ``[start, stop)`` of a cut piece (nothing when it is empty)."""
        if stop > start:
            item = (size / (stop - start), unit, block, start, stop, size)
            j = bisect.bisect(self.items, item)
            self.items.insert(j, item)
            self.keys.insert(j, item[0])
            self.size += size


def _hardest_first(room, load, budgets, tiebreak):
    """The ranks with room left, those whose remaining need is furthest from the mean density first
    (the pieces they need are the scarce ones), ties in tie-break order."""
    live = np.flatnonzero(room > 0)
    want = (budgets[live] - load[live]) / room[live]
    mean = (budgets[live] - load[live]).sum() / room[live].sum()
    return live[np.lexsort((tiebreak[live], -np.abs(want - mean)))]


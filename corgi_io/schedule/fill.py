"""Step 2 of size balance: the units the deal left fill the ranks' remaining rooms exactly.

Ranks go one after the other, those whose remaining need is furthest from the mean
density first (the pieces they need are the scarce ones). A rank takes the pool
piece whose density (size per sample) is closest to what it still needs per
sample, whole while it fits; the piece that finishes it is cut: the window of its
need whose size is closest to the rank's budget, read from that block's per-sample
sizes. When no window comes within ``FILL_TOLERANCE``, the rank takes a shorter
window and finishes with a piece from the other side of its target density (at
most two cuts per rank). The rests of cut pieces go back to the pool. Each rank
aims at its share of what the pool holds, so that earlier ranks' small misses
spread over the later ranks instead of piling up on the last one.
"""
from __future__ import annotations

import bisect

import numpy as np

from corgi_io.schedule.refine import window_sums

FILL_TOLERANCE = 1e-4  # a window within this fraction of the rank's budget is taken as it is


def fill(units, size, left, room, load, budgets, table, tiebreak) -> np.ndarray:
    """Placement rows ``(rank, unit, block, start, stop, size)`` that fill every rank's ``room`` with
    the units listed in ``left`` (``load`` is updated)."""
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


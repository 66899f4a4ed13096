"""Step 3 of size balance: window swaps between the slowest and the fastest rank.

A swap exchanges two windows of the same length ``k``, one from the slowest
rank's densest piece, one from the fastest rank's sparsest piece, so counts do
not change. ``k`` comes from the two pieces' densities (block-level sums); the
offsets come from the two pieces' per-sample sizes, the only ones read, picked
so that the size moved is closest to ``delta = (t_hi - t_lo) / (a_hi + a_lo)``,
which equalises the two ranks. Each swap adds at most 4 reads.
"""
from __future__ import annotations

import itertools

import numpy as np

ROUNDS_PER_RANK, TOLERANCE, CANDIDATES = 2, 5e-3, 3


def window_sums(sizes: np.ndarray, k: int) -> np.ndarray:
    """Sum of every window of ``k`` consecutive entries of ``sizes`` (``len - k + 1`` of them)."""
    ring = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    return ring[k:] - ring[:-k]


def refine(rows: np.ndarray, load: np.ndarray, budgets: np.ndarray, cost: np.ndarray, n: int,
           table, max_rows: int) -> np.ndarray:
    """Placement rows ``(rank, unit, block, start, stop, size)`` after at most ``2 W`` swaps while the
    slowest rank is above the ideal by more than ``TOLERANCE`` and the rows stay within ``max_rows``
    (each swap adds at most 4); ``load`` is updated."""
    a, fixed = cost[:, 0], cost[:, 1] * n
    ideal = (a * budgets + fixed).max()
    if (a * load + fixed).max() <= ideal * (1 + TOLERANCE):
        return rows
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    bounds = np.searchsorted(rows[:, 0], np.arange(len(load) + 1))
    changed: dict[int, np.ndarray] = {}

    def of(r):
        return changed.get(r, rows[bounds[r]:bounds[r + 1]])

    rows_now = len(rows)
    for _ in range(ROUNDS_PER_RANK * len(load)):
        t = a * load + fixed
        hi, lo = int(np.argmax(t)), int(np.argmin(t))
        if t[hi] <= ideal * (1 + TOLERANCE) or rows_now + 4 > max_rows:
            break
        delta = (t[hi] - t[lo]) / (a[hi] + a[lo])
        swap = _swap(of(hi), of(lo), delta, table, close=TOLERANCE * delta)
        if swap is None or max(t[hi] - a[hi] * swap[2], t[lo] + a[lo] * swap[2]) >= t[hi]:
            break
        rows_now += len(swap[0]) + len(swap[1]) - len(of(hi)) - len(of(lo))
        changed[hi], changed[lo], moved = swap
        load[hi] -= moved
        load[lo] += moved
    return np.concatenate([of(r) for r in range(len(load))]) if changed else rows


def _swap(hi_rows: np.ndarray, lo_rows: np.ndarray, delta: float, table, close: float):
    """(new rows of hi, new rows of lo, size moved from hi to lo) of the best swap found, or None.

    Candidates: the ``CANDIDATES`` densest pieces of hi against the ``CANDIDATES`` sparsest of lo,
    each pair with the window length their densities suggest and 6 lengths from 1 to the shorter
    piece at geometric steps; the search stops at the first swap within ``close`` of ``delta``."""
    dense_hi, dense_lo = _density(hi_rows), _density(lo_rows)
    read: dict = {}

    def sizes(rows, i):  # each candidate piece's samples are read once
        if (id(rows), i) not in read:
            read[id(rows), i] = table.samples(rows[i, 3], rows[i, 4])
        return read[id(rows), i]

    best, best_miss = None, abs(delta)
    for i, j in itertools.product(np.argsort(-dense_hi)[:CANDIDATES].tolist(),
                                  np.argsort(dense_lo)[:CANDIDATES].tolist()):
        su, sv = sizes(hi_rows, i), sizes(lo_rows, j)
        for k in _lengths(min(len(su), len(sv)), delta, dense_hi[i] - dense_lo[j]):
            ou, ov, moved = _offsets(su, sv, k, delta)
            if abs(moved - delta) < best_miss:
                best, best_miss = (i, j, ou, ov, k, moved), abs(moved - delta)
        if best_miss <= close:
            break
    if best is None:
        return None
    i, j, ou, ov, k, moved = best
    su, sv = sizes(hi_rows, i), sizes(lo_rows, j)
    return (_exchange(hi_rows, i, su, ou, lo_rows[j], sv, ov, k),
            _exchange(lo_rows, j, sv, ov, hi_rows[i], su, ou, k), moved)


def _density(rows: np.ndarray) -> np.ndarray:
    """Size per sample of each placement row."""
    return rows[:, 5] / (rows[:, 4] - rows[:, 3])


def _lengths(longest: int, delta: float, gap: float) -> list[int]:
    """Window lengths to try, longest first: 6 from 1 to ``longest`` at geometric steps, and the one
    that moves ``delta`` at a density ``gap`` (when positive)."""
    lengths = set(np.geomspace(1, longest, 6).astype(int).tolist())
    if gap > 0:
        lengths.add(int(min(longest, max(1, round(delta / gap)))))
    return sorted(lengths, reverse=True)


def _offsets(su: np.ndarray, sv: np.ndarray, k: int, delta: float) -> tuple[int, int, int]:
    """Offsets of a window of ``k`` in ``su`` and one in ``sv`` whose size difference is closest to
    ``delta``, and that difference."""
    wu, wv = window_sums(su, k), window_sums(sv, k)
    by = np.argsort(wv, kind="stable")
    near = np.clip(np.searchsorted(wv[by], wu - delta)[:, None] + [-1, 0], 0, len(wv) - 1)
    miss = np.abs(wu[:, None] - wv[by][near] - delta)
    ou, m = np.unravel_index(int(np.argmin(miss)), miss.shape)
    ov = int(by[near[ou, m]])
    return int(ou), ov, int(wu[ou] - wv[ov])


def _exchange(rows, i, own_sizes, own_at, other, other_sizes, other_at, k):
    """``rows`` with row i's window ``[own_at, own_at + k)`` replaced by ``other``'s window at ``other_at``."""
    rank, unit, block, a, z, _ = rows[i]
    parts = [(rank, unit, block, a, a + own_at, own_sizes[:own_at].sum()),
             (rank, unit, block, a + own_at + k, z, own_sizes[own_at + k:].sum()),
             (rank, other[1], other[2], other[3] + other_at, other[3] + other_at + k,
              other_sizes[other_at:other_at + k].sum())]
    kept = np.array([p for p in parts if p[4] > p[3]], np.int64).reshape(-1, 6)
    return np.concatenate([np.delete(rows, i, axis=0), kept])

"""Size-balanced placement of pieces on ranks with exactly equal sample counts.

Used by ``assign_ranks`` for ``balance="size"`` (equal size budgets) and
``balance="dynamic"`` (budgets that equalise predicted time). The algorithm is
in docs/algorithms.md; in short:

1. greedy: units (blocks, in epoch order) go whole to the rank, among those with
   room for the unit's count, whose remaining budget per remaining sample is
   closest to the unit's own size per sample;
2. fill: units that fit nowhere whole are cut to fill the remaining rooms
   exactly (a few extra reads);
3. refine: while the slowest rank is above the target, swap two equal-length
   windows between it and the fastest rank, picked so the swap moves the size
   that equalises the two (at most ``4`` extra reads per swap).
"""
from __future__ import annotations

import numpy as np

_WINDOW_SAMPLE = 4096  # windows considered per rank and length in one refine step


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


def place(units: np.ndarray, n: int, budgets: np.ndarray, prefix: np.ndarray,
          cost: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Place ``units`` (pieces in read order, total count ``W * n``) on ranks,
    ``n`` samples each, loads close to ``budgets``. ``prefix`` is the size
    prefix sum, ``cost`` the (W, 2) time model used by the refine step.
    Returns per rank its pieces in sequence order."""
    w = len(budgets)
    count = units[:, 2] - units[:, 1]
    size = (prefix[units[:, 2]] - prefix[units[:, 1]]).astype(np.float64)
    room, load = np.full(w, n, np.int64), np.zeros(w)
    parts: list[list] = [[] for _ in range(w)]  # rows (unit index, block, start, stop)
    left = []
    for i in range(len(units)):
        fits = room >= count[i]
        if not fits.any():
            left.append(i)
            continue
        want = (budgets - load) / np.maximum(room, 1)
        r = int(np.argmin(np.where(fits, np.abs(want - size[i] / count[i]), np.inf)))
        parts[r].append((i, *units[i]))
        room[r] -= count[i]
        load[r] += size[i]
    for i in left:
        blk, a, z = units[i]
        while a < z:
            r = int(np.argmax(np.where(room > 0, budgets - load, -np.inf)))
            k = min(int(room[r]), int(z - a))
            parts[r].append((i, blk, a, a + k))
            room[r] -= k
            load[r] += prefix[a + k] - prefix[a]
            a += k
    plans = [np.array(p, dtype=np.int64).reshape(-1, 4) for p in parts]
    _refine(plans, load, budgets, prefix, cost, n, rng)
    return [p[np.lexsort((p[:, 2], p[:, 0])), 1:] for p in plans]


def _windows(plan: np.ndarray, k: int, prefix: np.ndarray, rng: np.random.Generator):
    """(row, start, size) of windows of k samples inside the rows of ``plan``,
    a random subset of at most _WINDOW_SAMPLE."""
    free = np.maximum(plan[:, 3] - plan[:, 2] - k + 1, 0)
    total = int(free.sum())
    pick = np.arange(total) if total <= _WINDOW_SAMPLE else rng.choice(total, _WINDOW_SAMPLE, replace=False)
    cum = np.cumsum(free)
    row = np.searchsorted(cum, pick, "right")
    start = plan[row, 2] + pick - (cum[row] - free[row])
    return row, start, (prefix[start + k] - prefix[start]).astype(np.float64)


def _cut(plan: np.ndarray, row: int, start: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Remove window [start, start+k) from ``plan[row]``: (rest of plan, window row)."""
    unit, blk, a, z = plan[row]
    keep = [r for r in ((unit, blk, a, start), (unit, blk, start + k, z)) if r[3] > r[2]]
    rest = np.concatenate([np.delete(plan, row, axis=0), np.array(keep, np.int64).reshape(-1, 4)])
    return rest, np.array([[unit, blk, start, start + k]], np.int64)


def _refine(plans, load, budgets, prefix, cost, n, rng, rounds_per_rank=2, tol=5e-3):
    """Window swaps between the slowest and the fastest rank (in place)."""
    a, fixed = cost[:, 0], cost[:, 1] * n
    ideal = (a * budgets + fixed).max()
    for _ in range(rounds_per_rank * len(plans)):
        t = a * load + fixed
        hi, lo = int(np.argmax(t)), int(np.argmin(t))
        if t[hi] <= ideal * (1 + tol):
            return
        delta = (t[hi] - t[lo]) / (a[hi] + a[lo])  # size to move hi -> lo
        longest = min((plans[hi][:, 3] - plans[hi][:, 2]).max(), (plans[lo][:, 3] - plans[lo][:, 2]).max())
        best = (max(t[hi], t[lo]), None)
        for k in np.unique(np.geomspace(1, longest, 12).astype(np.int64)):
            rh, sh, zh = _windows(plans[hi], k, prefix, rng)
            rl, sl, zl = _windows(plans[lo], k, prefix, rng)
            if not len(zh) or not len(zl):
                continue
            order = np.argsort(zl)
            j = np.searchsorted(zl[order], zh - delta)
            for jj in (order[np.maximum(j - 1, 0)], order[np.minimum(j, len(zl) - 1)]):
                d = zh - zl[jj]
                new = np.maximum(t[hi] - a[hi] * d, t[lo] + a[lo] * d)
                m = int(np.argmin(new))
                if new[m] < best[0]:
                    best = (new[m], (k, rh[m], sh[m], rl[jj[m]], sl[jj[m]], d[m]))
        if best[1] is None:
            return
        k, rh, sh, rl, sl, d = best[1]
        plans[hi], win_h = _cut(plans[hi], rh, sh, k)
        plans[lo], win_l = _cut(plans[lo], rl, sl, k)
        plans[hi] = np.concatenate([plans[hi], win_l])
        plans[lo] = np.concatenate([plans[lo], win_h])
        load[hi] -= d
        load[lo] += d

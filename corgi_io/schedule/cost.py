"""Fitting a rank's cost model from measured steps: time ≈ a * size + b * samples (Chronica dynamic).

Pure numpy.  The loader collects (size sum, sample count, seconds) per training step;
at the epoch boundary every rank fits its own (a, b) and the ranks exchange them, so
the next epoch's budgets give faster ranks more work.
"""
from __future__ import annotations

import numpy as np

MIN_STEPS = 3


def fit_cost(size_sums, counts, seconds) -> tuple | None:
    """Least-squares (a, b) with a > 0, b >= 0 for seconds ≈ a * size_sum + b * count; None with too few steps.

    When the steps do not vary enough to separate a from b (all equal sizes), the time is
    attributed to size alone: a = total seconds / total size.
    """
    size_sums, counts, seconds = (np.asarray(x, dtype=np.float64) for x in (size_sums, counts, seconds))
    if len(seconds) < MIN_STEPS or size_sums.sum() <= 0 or seconds.sum() <= 0:
        return None
    design = np.stack([size_sums, counts], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    if not (a > 0 and b >= 0 and np.isfinite(a) and np.isfinite(b)):
        a, b = seconds.sum() / size_sums.sum(), 0.0
    return float(a), float(b)


def unit_cost(world_size: int) -> np.ndarray:
    """The default cost model, rows ``(a, b) = (1, 0)``: a rank's time is its size sum."""
    return np.tile([1.0, 0.0], (world_size, 1))


def slowest_time(size_sums, counts, cost: np.ndarray) -> float:
    """The slowest rank's predicted time ``max_r a_r * size_r + b_r * count_r``."""
    size_sums, counts = np.asarray(size_sums, np.float64), np.asarray(counts, np.float64)
    return float((cost[:, 0] * size_sums + cost[:, 1] * counts).max())


def keep_if_faster(candidate_sizes, baseline_sizes, counts, cost: np.ndarray) -> bool:
    """Whether a balanced plan with per-rank ``candidate_sizes`` is kept over the baseline (count) plan
    with ``baseline_sizes``, both with per-rank ``counts``: it is unless its slowest rank is predicted
    slower. This is what makes size balance never worse than count balance."""
    return slowest_time(candidate_sizes, counts, cost) <= slowest_time(baseline_sizes, counts, cost)

"""What a plan does to a synchronous training epoch, without reading any data.

Used by ``corgi plan`` and the benchmarks. The model: a step takes as long as
its slowest rank, and a rank's step time is ``a_r * batch size sum + b_r *
batch count`` (by default ``a = 1, b = 0``: time proportional to size).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from corgi_io.errors import ArgumentError

from corgi_io.schedule.assign import epoch_plans
from corgi_io.schedule.cost import unit_cost
from corgi_io.schedule.spec import BlockTable, EpochSpec
from corgi_io.schedule.stream import buffer_plan
from corgi_io.schedule.workers import split_workers


def imbalance(values) -> float:
    """max / mean of per-rank loads, 1.0 for an all-zero load."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.max() / values.mean()) if values.any() else 1.0


def rank_batches(pieces: np.ndarray, spec: EpochSpec, rank: int, sizes: np.ndarray,
                 batch_size: int | None = None) -> list[np.ndarray]:
    """The batches (arrays of sample ids) one rank trains on, in DataLoader
    order: each worker's ``buffer_plan`` stream cut into groups of ``batch_size``
    (default ``spec.batch_size``; last one partial), workers taken round-robin and
    skipped once exhausted, as ``torch.utils.data.DataLoader`` does with an
    ``IterableDataset``. With ``spec.batch_size`` each worker composes
    size-balanced batches of that size."""
    batch_size = batch_size or spec.batch_size
    per_worker = []
    for w, part in enumerate(split_workers(pieces, spec.num_workers, spec.batch_size or 1, spec.drop_last)):
        ids = [order for _, order in buffer_plan(part, sizes=sizes, **spec.stream(rank, w))]
        ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        per_worker.append([ids[i:i + batch_size] for i in range(0, len(ids), batch_size)])
    longest = max(map(len, per_worker))
    return [b[i] for i in range(longest) for b in per_worker if i < len(b)]


def simulate(table: BlockTable, spec: EpochSpec, *, batch_size: int | None = None, cost_model=None,
             owner=None) -> dict:
    """Per-rank and per-step load of one epoch's plan, and its synchronous
    epoch time relative to the same plan with ``balance="count"``.

    ``table.sizes`` must be the whole per-sample column (every batch is summed).
    ``batch_size`` is the DataLoader's, by default ``spec.batch_size`` (which, when
    set, also composes size-balanced batches).

    Returns a dict: ``rank_size`` (per-rank size sums), ``size_imbalance``
    (max / mean of them), ``step_size`` (steps x ranks batch size sums),
    ``step_imbalance`` (p50, p95, max of per-step max / mean over ranks),
    ``epoch_time`` (sum over steps of the slowest rank's time),
    ``count_epoch_time`` and ``speedup`` (count time / this time).
    """
    sizes = np.asarray(table.sizes, dtype=np.int64)
    batch_size = batch_size or spec.batch_size
    if not batch_size:
        raise ArgumentError("simulate needs a batch size")
    w = spec.world_size
    cost = unit_cost(w) if cost_model is None else np.asarray(cost_model, np.float64)

    def run(s):
        plans = epoch_plans(table, s, cost_model=cost_model, owner=owner)
        steps = [rank_batches(p, s, r, sizes, batch_size) for r, p in enumerate(plans)]
        step_size = np.array([[sizes[b].sum() for b in rb] for rb in steps], np.float64).T.reshape(-1, w)
        step_count = np.array([[len(b) for b in rb] for rb in steps], np.float64).T.reshape(-1, w)
        time = (step_size * cost[:, 0] + step_count * cost[:, 1]).max(axis=1).sum()
        return step_size, float(time)

    step_size, time = run(spec)
    count_time = time if spec.balance == "count" else run(replace(spec, balance="count"))[1]
    rank_size = step_size.sum(axis=0)
    mean = step_size.mean(axis=1)
    ratio = np.divide(step_size.max(axis=1), mean, out=np.ones_like(mean), where=mean > 0)
    return {
        "rank_size": rank_size,
        "size_imbalance": imbalance(rank_size),
        "step_size": step_size,
        "step_imbalance": dict(zip(("p50", "p95", "max"), np.percentile(ratio, [50, 95, 100]).tolist()))
        if len(ratio) else {"p50": 1.0, "p95": 1.0, "max": 1.0},
        "epoch_time": time,
        "count_epoch_time": count_time,
        "speedup": count_time / time if time else 1.0,
    }

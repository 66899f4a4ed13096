"""What a plan does to a synchronous training epoch, without reading any data.

Used by ``corgi plan`` and the benchmarks. The model: a step takes as long as
its slowest rank, and a rank's step time is ``a_r * batch size sum + b_r *
batch count`` (by default ``a = 1, b = 0``: time proportional to size).
"""
from __future__ import annotations

import numpy as np

from .assign import assign_ranks
from .stream import buffer_plan
from .workers import split_workers



def imbalance(values) -> float:
    """max / mean of per-rank loads, 1.0 for an all-zero load."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.max() / values.mean()) if values.any() else 1.0

def rank_batches(pieces: np.ndarray, batch_size: int, *, num_workers: int = 0, rank: int = 0,
                 balanced: bool = False, **stream) -> list[np.ndarray]:
    """The batches (arrays of sample ids) one rank trains on, in DataLoader
    order: each worker's ``buffer_plan`` stream (``stream`` keywords) cut into
    groups of ``batch_size`` (last one partial), workers taken round-robin and
    skipped once exhausted, as ``torch.utils.data.DataLoader`` does with an
    ``IterableDataset``. ``balanced=True`` has each worker compose
    size-balanced batches of ``batch_size`` (``stream`` must hold ``sizes``)."""
    per_worker = []
    for w, part in enumerate(split_workers(pieces, num_workers)):
        extra = {"batch_size": batch_size} if balanced else {}
        ids = [order for _, order in buffer_plan(part, rank=rank, worker=w, **extra, **stream)]
        ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        per_worker.append([ids[i:i + batch_size] for i in range(0, len(ids), batch_size)])
    longest = max(map(len, per_worker))
    return [b[i] for i in range(longest) for b in per_worker if i < len(b)]


def simulate(block_first, block_count, sizes, world_size: int, *, batch_size: int,
             num_workers: int = 0, balance: str = "size", seed: int = 0, epoch: int = 0,
             drop_last: bool = False, cost_model=None, partitions=None,
             balanced_batches: bool = True, **stream) -> dict:
    """Per-rank and per-step load of one epoch's plan, and its synchronous
    epoch time relative to the same plan with ``balance="count"``.

    Returns a dict: ``rank_size`` (per-rank size sums), ``size_imbalance``
    (max / mean of them), ``step_size`` (steps x ranks batch size sums),
    ``step_imbalance`` (p50, p95, max of per-step max / mean over ranks),
    ``epoch_time`` (sum over steps of the slowest rank's time),
    ``count_epoch_time`` and ``speedup`` (count time / this time).
    ``stream`` goes to ``buffer_plan`` (``shuffle``, ``buffer_pieces``...);
    ``balanced_batches`` asks it for size-balanced batches.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    cost = np.tile([1.0, 0.0], (world_size, 1)) if cost_model is None else np.asarray(cost_model, np.float64)

    def run(mode):
        plans = assign_ranks(block_first, block_count, world_size, seed=seed, epoch=epoch, balance=mode,
                             drop_last=drop_last, sizes=sizes, cost_model=cost_model, partitions=partitions,
                             shuffle_blocks=stream.get("shuffle", "corgipile") != "none")
        steps = [rank_batches(p, batch_size, num_workers=num_workers, rank=r, seed=seed, epoch=epoch,
                              balanced=balanced_batches, sizes=sizes, **stream) for r, p in enumerate(plans)]
        step_size = np.array([[sizes[b].sum() for b in rb] for rb in steps], np.float64).T.reshape(-1, world_size)
        step_count = np.array([[len(b) for b in rb] for rb in steps], np.float64).T.reshape(-1, world_size)
        time = (step_size * cost[:, 0] + step_count * cost[:, 1]).max(axis=1).sum()
        return step_size, float(time)

    step_size, time = run(balance)
    count_time = time if balance == "count" else run("count")[1]
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

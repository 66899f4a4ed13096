"""What a board's totals say (pure, numpy in and plain data out): where a worker's wall time went, where a rank's
time went, whether the training loop waited for data, and which rank straggles.

A board is an array (slots, len(STAGES), len(FIELDS)): slot 0 the training process (its trainer stages, and
the worker stages of an iteration without DataLoader workers), slot 1 + w DataLoader worker w.

A worker's **path** is its consumer thread's time per stage (which add up to its wall time), with ``read_wait``
shared out among the read stages in proportion to their thread time: the read stage that took most of the
reading threads' time is taken to be what the consumer waited on.  A rank's path is its workers' paths
averaged over the workers that ran, and its **busy** time is that path without ``handoff`` (time a worker
waited for the trainer to take what it made).  The **stall share** is the training loop's waiting over its
waiting plus its own steps.  All O(slots x stages).
"""
from __future__ import annotations

import numpy as np

from corgi_io.timing.stages import FIELDS, NESTED, STAGES, names, stage_index

SECONDS = FIELDS.index("seconds")
READ = np.array([s.side == "read" and s.name not in NESTED for s in STAGES])
WORKER = np.array([s.side == "worker" for s in STAGES])
TRAINER = np.array([s.side == "trainer" for s in STAGES])
READ_WAIT, HANDOFF = stage_index("read_wait"), stage_index("handoff")
STALL, STEP = stage_index("stall"), stage_index("step")
DATA_BOUND_SHARE = 0.05  # a loop that waits more than this share of its time is data-bound


def worker_path(row: np.ndarray) -> np.ndarray:
    """Seconds per stage on one slot's consumer path (trainer stages zero): see the module."""
    seconds = np.asarray(row, np.float64)[:, SECONDS]
    path = np.where(WORKER, seconds, 0.0)
    reading = np.where(READ, seconds, 0.0)
    if reading.sum() > 0:
        path += path[READ_WAIT] * reading / reading.sum()
        path[READ_WAIT] = 0.0
    return path


def rank_path(board: np.ndarray) -> np.ndarray:
    """The rank's path (`worker_path` averaged over the slots whose consumer ran), with the trainer's stages of
    slot 0 as they are: one vector of seconds per stage, what the ranks compare (`straggler`)."""
    board = np.asarray(board, np.float64)
    paths = np.array([worker_path(row) for row in board]) if len(board) else np.zeros((0, len(STAGES)))
    ran = paths.sum(axis=1) > 0
    path = paths[ran].mean(axis=0) if ran.any() else np.zeros(len(STAGES))
    return path + (np.where(TRAINER, board[0, :, SECONDS], 0.0) if len(board) else 0.0)


def busy(path: np.ndarray) -> float:
    """A path's working seconds: its worker and read stages, without `handoff` (waiting for the trainer)."""
    path = np.asarray(path, np.float64)
    return float(path[~TRAINER].sum() - path[HANDOFF])


def slowest_stage(path: np.ndarray) -> tuple:
    """(name, share of the busy time) of the stage that took most of a path's busy time; ("", 0.0) if none."""
    path = np.where(TRAINER, 0.0, np.asarray(path, np.float64))
    path[HANDOFF] = 0.0
    total = path.sum()
    if total <= 0:
        return "", 0.0
    top = int(path.argmax())
    return STAGES[top].name, float(path[top] / total)


def stall_share(path: np.ndarray) -> float | None:
    """The training loop's waiting for data over its waiting plus its own steps; None if it was not watched."""
    stall, step = float(path[STALL]), float(path[STEP])
    return None if stall + step <= 0 else stall / (stall + step)


def verdict(path: np.ndarray) -> str:
    """One line: does the loader keep up with the training loop, or by how much is the loop data-bound, and in
    which stage.  Without a watched loop, what the workers did (their busy stage, or waiting on the trainer)."""
    stage, share = slowest_stage(path)
    where = f"{stage} {share:.0%} of the loader's busy time" if stage else "no loader stage timed"
    waited = stall_share(path)
    if waited is None:
        idle = float(path[HANDOFF]) / max(float(path[~TRAINER].sum()), 1e-12)
        return f"no training loop watched; workers waited on the consumer {idle:.0%} of their time; {where}"
    if waited <= DATA_BOUND_SHARE:
        return f"keeps up: the training loop waited for data {waited:.1%} of its time; {where}"
    return f"data-bound by {waited:.0%}: the training loop waited for data {waited:.0%} of its time; slowest: {where}"


def straggler(paths: np.ndarray) -> dict | None:
    """The straggler among ranks, from their paths (ranks, stages): the rank of most busy time, its slowest stage
    and share, and its busy time over the median rank's; None for fewer than two ranks or no time."""
    paths = np.asarray(paths, np.float64)
    if len(paths) < 2:
        return None
    loads = np.array([busy(p) for p in paths])
    median = float(np.median(loads))
    if median <= 0:
        return None
    rank = int(loads.argmax())
    stage, share = slowest_stage(paths[rank])
    return {"rank": rank, "stage": stage, "share": share, "vs_median": float(loads[rank] / median),
            "busy_seconds": loads.tolist()}


def straggler_line(found: dict | None) -> str:
    """``rank 17: storage 81% of its time, 2.30x the median rank`` (or that no rank straggles)."""
    if found is None:
        return "no straggler: fewer than two ranks, or no time measured"
    return (f"rank {found['rank']}: {found['stage']} {found['share']:.0%} of its time, "
            f"{found['vs_median']:.2f}x the median rank")


def as_table(row: np.ndarray) -> dict:
    """One slot's (or a sum's) counts as plain data: {stage: {field: number}} for the stages that ran."""
    row = np.asarray(row, np.float64)
    return {name: {field: (float(v) if field == "seconds" else int(v)) for field, v in zip(FIELDS, values)}
            for name, values in zip(names(), row) if values.any()}

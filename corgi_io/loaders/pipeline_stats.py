"""`CorgiPileDataset.stats`: where the loader's time goes, per worker and per rank, readable while it runs.

The dataset makes a board in shared memory when it is constructed, before any worker exists (as
`SharedEpoch` does: fork workers inherit it, spawn ones receive it through torch's reductions): one slot per
process of the rank, slot 0 the training process and slot 1 + w DataLoader worker w, each a row of
(seconds, bytes, samples, calls) per stage (`corgi_io.timing.stages`).  Each process times its own stages
with a `StageClock` and adds to its own slot only, so the training process reads every worker's totals,
persistent workers included, at any moment and without a message (`board`, `snapshot`).  A slot belongs to a
worker number, not a process: two DataLoaders iterating one dataset at the same time mix their workers' totals
(and may lose an update, two processes adding to one slot): time one loader per dataset.

`watch(loader)` times the training loop around the loader (the data stall, its own steps), writes a JSON line
every `every` steps and, where the tensorboard package is installed, TensorBoard scalars.  At `set_epoch` the
ranks exchange their epoch's paths (`end_epoch`, one tensor `all_gather` of a few floats, no pickle, when
torch.distributed is initialised) and rank 0 logs the straggler line (`corgi_io.timing.summary`).
"""
from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import torch

from corgi_io.arguments import choose
from corgi_io.timing.clock import NullClock, StageClock, TraceRing
from corgi_io.timing.stages import FIELDS, STAGES, TIMINGS
from corgi_io.timing.summary import as_table, rank_path, stall_share, straggler, straggler_line, verdict

from corgi_io.loaders.distributed import gather_floats, worker_and_count

MAX_WORKERS = 128       # DataLoader workers per rank with a slot of their own; more are not timed (warned)
TRACE_CAPACITY = 8192  # intervals kept per slot under timing="trace" (the newest): 192 KiB of shared memory
TRACE_WORKERS = 32     # workers traced under timing="trace" (later ones are timed, not traced)
log = logging.getLogger("corgi_io")


class PipelineStats:
    """A rank's stage board and the clocks of this process (see the module).  `mode`: one of `TIMINGS`."""

    def __init__(self, mode: str = "off"):
        choose("timing", mode, TIMINGS)
        self.mode = mode
        slots = 1 + MAX_WORKERS if self.mode != "off" else 1
        self._board = torch.zeros((slots, len(STAGES), len(FIELDS)), dtype=torch.float64).share_memory_()
        traced = self.mode == "trace"
        traced_slots = min(slots, 1 + TRACE_WORKERS) if traced else 0
        self._events = torch.zeros((traced_slots, TRACE_CAPACITY, 3), dtype=torch.float64).share_memory_()
        self._written = torch.zeros(slots, dtype=torch.int64).share_memory_()
        self._clocks = {}      # (pid, role) -> this process's clock of that role
        self._epoch_start = np.zeros(self._board.shape)  # the board at the last `end_epoch` (training process)
        self.last_epoch = None  # what `end_epoch` found: {"epoch", "paths", "straggler", "line"}

    def __getstate__(self):
        return {**self.__dict__, "_clocks": {}}

    def worker_clock(self):
        """This process's clock of the loader's stages: its DataLoader worker's slot, or slot 0 in the training
        process (an iteration without workers); a `NullClock` when timing is off or the worker has no slot."""
        worker, count = worker_and_count()
        in_worker = torch.utils.data.get_worker_info() is not None
        if in_worker and worker >= MAX_WORKERS:
            if worker == MAX_WORKERS:
                warnings.warn(f"CorgiPileDataset.stats times {MAX_WORKERS} DataLoader workers per rank; workers "
                              f"{MAX_WORKERS}..{count - 1} are not timed", stacklevel=2)
            return NullClock()
        return self._clock("worker", 1 + worker if in_worker else 0)

    def trainer_clock(self):
        """The training process's clock of the loop around the loader (`watch`): slot 0."""
        return self._clock("trainer", 0)

    def _clock(self, role: str, slot: int):
        key = (os.getpid(), role)
        if key not in self._clocks:
            self._clocks[key] = NullClock() if self.mode == "off" else StageClock(self._board.numpy()[slot],
                                                                                self._trace(slot))
        return self._clocks[key]

    def _trace(self, slot: int):
        if slot >= len(self._events):
            return None
        return TraceRing(self._events.numpy()[slot], self._written.numpy()[slot:slot + 1])

    def flush(self) -> None:
        """Add what this process's clocks hold to the board now (their own flushes wait up to FLUSH_SECONDS).  From
        the thread that uses them: the training loop's, which is also the loader's without DataLoader workers."""
        pid = os.getpid()
        for (owner, _), clock in self._clocks.items():
            if owner == pid:
                clock.flush()

    def board(self) -> np.ndarray:
        """A copy of the board now: (slots, stages, fields) totals since the dataset was made."""
        return self._board.numpy().copy()

    def events(self) -> list:
        """Under timing="trace": per slot, its kept intervals (stage index, start, end), oldest first."""
        out = []
        for events, written in zip(self._events.numpy(), self._written.numpy()):
            kept = min(int(written), len(events))
            out.append(np.roll(events, -(int(written) % len(events)), axis=0)[-kept:] if kept else events[:0])
        return out

    def snapshot(self, since: np.ndarray | None = None) -> dict:
        """The totals as plain data (since the board `since`, when given): per slot that ran, its stage table;
        the rank's path (seconds per stage, `timing.summary.rank_path`) and the verdict line."""
        board = self.board() - (0 if since is None else since)
        path = rank_path(board)
        slots = {("trainer" if s == 0 else f"worker {s - 1}"): as_table(row) for s, row in enumerate(board)
                 if row.any()}
        return {"slots": slots, "total": as_table(board.sum(axis=0)),
                "path": {s.name: float(v) for s, v in zip(STAGES, path) if v}, "stall_share": stall_share(path),
                "verdict": verdict(path)}

    def end_epoch(self, epoch: int, rank: int, world_size: int) -> dict:
        """The epoch that just ended, as every rank saw it: each rank's path (gathered across ranks when
        torch.distributed is initialised: call it on every rank, as `set_epoch` does), the straggler and its
        line, logged by rank 0.  The board's totals since the last call make the epoch."""
        board = self.board()
        local = rank_path(board - self._epoch_start).tolist()
        self._epoch_start = board
        gathered = gather_floats(local, world_size)
        paths = [local] if gathered is None else gathered.tolist()
        found = straggler(np.array(paths))
        self.last_epoch = {"epoch": epoch, "paths": paths, "straggler": found, "line": straggler_line(found)}
        if rank == 0 and found is not None:
            log.info("corgi-io epoch %d straggler: %s", epoch, self.last_epoch["line"])
        return self.last_epoch

    def watch(self, loader, every: int | None = None, jsonl=None, tensorboard=None):
        """`loader` with the training loop around it timed: see `corgi_io.loaders.stats_watch.WatchedLoader`."""
        from corgi_io.loaders.stats_watch import WatchedLoader

        return WatchedLoader(self, loader, every, jsonl, tensorboard)

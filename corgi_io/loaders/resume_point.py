"""Where a dataset stands in its epoch, for `state_dict` and `load_state_dict` (torchdata's StatefulDataLoader).

Each process (the main one, or a DataLoader worker) saves where it stands: the epoch, the
finished resume segments, its world and worker count, and how many samples it has yielded.
A loaded state waits for the iteration of its epoch; what resuming it means (which samples
remain, for which worker) is the pure arithmetic of `corgi_io.schedule.resume`.
"""
from __future__ import annotations

import numpy as np

from corgi_io.schedule import worker_state
from corgi_io.schedule.planner import Planner

from corgi_io.loaders.distributed import worker_and_count


class ResumePoint:
    """One process's place in its epoch, and a loaded state not yet resumed.

    The saved count is in the planner's units: samples (rows for token rows), or plan items (batches) for
    a planner that `counts_items` (budgeted batches, whose ranks step alike in batches but not in samples);
    the planner resumes it (`Planner.resumed_plan`)."""

    def __init__(self):
        self.loaded = None   # a merged saved state (`merge_states`), applied by the next iteration of its epoch
        self.current = None  # (epoch, finished segments, world, workers, worker) of this process's iteration
        self.yielded = 0     # samples that iteration has yielded since it started
        self.done = 0        # units a resume skipped
        self.item_ends = None  # counting items: where each item of this iteration's plan ends, in samples

    @property
    def units(self) -> int:
        """Units yielded in this iteration's epoch: samples, or whole plan items."""
        if self.item_ends is None:
            return self.done + self.yielded
        return self.done + int(np.searchsorted(self.item_ends, self.yielded, side="right"))

    def state(self, identity: dict, epoch: int, world_size: int) -> dict:
        """This process's saved state: the loaded point while it waits (so a checkpoint taken before the
        resumed epoch runs keeps it), else this iteration's, else an empty one of `epoch`."""
        if self.loaded is not None and self.current is None:
            r = self.loaded
            return {"pending": [worker_state(identity, r["epoch"], r["finished"], r["world_size"], r["num_workers"],
                                             worker, count) for worker, count in r["yielded"].items()]}
        if self.current is None:  # not iterated yet in this process (a worker that has yielded nothing)
            worker, workers = worker_and_count()
            self.current, self.yielded, self.done, self.item_ends = (epoch, [], world_size, workers, worker), 0, 0, None
        return worker_state(identity, *self.current, self.units)

    def begin(self) -> None:
        """A new iteration is made: until it plans (`start`, at its first item), this process stands at the start
        of the dataset's current epoch, or at a loaded state still waiting, never where its last iteration ended.

        Without this, a persistent DataLoader worker saved its previous epoch's end as its state in the new epoch
        until its first batch, and a checkpoint taken then resumed that epoch without the worker's share."""
        self.current, self.yielded, self.done, self.item_ends = None, 0, 0, None

    def start(self, planner: Planner, rank: int, worker: int, num_workers: int):
        """The buffer plan of a worker's iteration of `planner`'s epoch, from where it stands: a loaded state of
        that epoch is resumed by this iteration (and only by it), otherwise the epoch is whole."""
        epoch, world_size = planner.spec.epoch, planner.spec.world_size
        due = self.loaded is not None and self.loaded["epoch"] == epoch
        resume, self.loaded = (self.loaded, None) if due else (None, self.loaded)
        if resume is None:
            plan, finished, self.done = planner.plan(rank, worker, num_workers), [], 0
        else:
            plan, finished, self.done = planner.resumed_plan(rank, worker, num_workers, resume)
        self.current, self.yielded, self.item_ends = (epoch, finished, world_size, num_workers, worker), 0, None
        if planner.counts_items:
            plan = list(plan)
            self.item_ends = np.cumsum([len(order) for _, order in plan])
        return plan

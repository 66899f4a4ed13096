"""Where a dataset stands in its epoch, for `state_dict` and `load_state_dict` (torchdata's StatefulDataLoader).

Each process (the main one, or a DataLoader worker) saves its own progress: the epoch, the
finished resume segments, its world and worker count, and how many samples it has yielded.
A loaded state waits for the iteration of its epoch; what resuming it means (which samples
remain, for which worker) is the pure arithmetic of `corgi_io.schedule.resume`.
"""
from __future__ import annotations

from corgi_io.schedule import EpochPlanner, resumed_plan, worker_state

from corgi_io.loaders.distributed import worker_and_count


class Progress:
    """One process's place in its epoch, and a loaded state not yet resumed."""

    resumer = staticmethod(resumed_plan)  # (planner, rank, worker, workers, state) -> (plan, finished, yielded)

    def __init__(self):
        self.loaded = None   # a merged saved state (`merge_states`), applied by the next iteration of its epoch
        self.current = None  # (epoch, finished segments, world, workers, worker) of this process's iteration
        self.yielded = 0     # samples that iteration has yielded, counting those a resume skipped

    def state(self, identity: dict, epoch: int, world_size: int) -> dict:
        """This process's saved state: the loaded point while it waits (so a checkpoint taken before the
        resumed epoch runs keeps it), else this iteration's, else an empty one of `epoch`."""
        if self.loaded is not None and self.current is None:
            r = self.loaded
            return {"pending": [worker_state(identity, r["epoch"], r["finished"], r["world_size"], r["num_workers"],
                                             worker, count) for worker, count in r["yielded"].items()]}
        if self.current is None:  # not iterated yet in this process (a worker that has yielded nothing)
            worker, workers = worker_and_count()
            self.current, self.yielded = (epoch, [], world_size, workers, worker), 0
        return worker_state(identity, *self.current, self.yielded)

    def start(self, planner: EpochPlanner, rank: int, worker: int, num_workers: int):
        """The buffer plan of a worker's iteration of `planner`'s epoch, from where it stands: a loaded state of
        that epoch is resumed by this iteration (and only by it), otherwise the epoch is whole."""
        epoch, world_size = planner.spec.epoch, planner.spec.world_size
        due = self.loaded is not None and self.loaded["epoch"] == epoch
        resume, self.loaded = (self.loaded, None) if due else (None, self.loaded)
        if resume is None:
            plan, finished, self.yielded = planner.plan(rank, worker, num_workers), [], 0
        else:
            plan, finished, self.yielded = self.resumer(planner, rank, worker, num_workers, resume)
        self.current = (epoch, finished, world_size, num_workers, worker)
        return plan

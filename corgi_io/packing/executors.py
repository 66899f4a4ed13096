"""Where the pack's tasks run: this process, a local process pool, or a Dask cluster (dask_executor.py).

An executor runs a module-level task function (`encode.write_shard`) over small picklable tasks
and yields the small results as the tasks finish, in any order; the pipeline never depends on
that order, and every task writes its own output, so the bytes are the same wherever it ran.
The first task that fails raises in the driver, and no further task starts.

    class Executor(Protocol):
        def __enter__(self) -> Executor: ...          # start workers
        def __exit__(self, *exc) -> None: ...         # stop them
        def run(self, function, tasks, progress) -> Iterator[result]: ...

Progress: a task calls `report(samples, nbytes)` as it goes; an executor that can relay these
calls to the driver passes them to `progress(samples, nbytes)` live.  One that cannot (a remote
worker) calls ``progress(*result.progress)`` when each task's result arrives instead.

`open_executor` picks one: a Dask client when given (imported only then), else the local pool.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, wait

from corgi_io.errors import PackError
from corgi_io.processes import worker_pool

TASKS_AHEAD = 2    # tasks queued per worker process
POLL_SECONDS = 0.2  # how often the driver relays the workers' progress

_sink = None  # where `report` goes in this process: a callable, or a shared (samples, bytes) counter


def report(samples: int, nbytes: int) -> None:
    """Tell the driver's progress display that `samples` samples of `nbytes` payload bytes were handled."""
    if _sink is None:
        return
    if callable(_sink):
        _sink(samples, nbytes)
        return
    with _sink.get_lock():
        _sink[0] += samples
        _sink[1] += nbytes


def _count_into(counter) -> None:
    global _sink
    _sink = counter


def open_executor(workers: int, client=None):
    """The executor for `workers` local processes, or for the Dask cluster of `client` (a
    ``distributed.Client``; `workers` must then be left at 1: the cluster's workers write)."""
    if client is None:
        return LocalExecutor(workers)
    if workers != 1:
        raise PackError(f"workers={workers} is for the local pool; with a Dask client the cluster's workers "
                        "write the shards (size the cluster instead)")
    from corgi_io.packing.dask_executor import DaskExecutor

    return DaskExecutor(client)


class LocalExecutor:
    """Tasks in this process (`workers` <= 1) or in a pool of `workers` forked processes that die with it."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = self._counter = None

    def __enter__(self):
        if self.workers > 1:
            self._counter = multiprocessing.get_context("fork").Array("q", 2)
            self._pool = worker_pool(self.workers, _count_into, (self._counter,))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def run(self, function, tasks, progress=None):
        """function(task) for every task, results as they finish; `progress(samples, nbytes)` hears the reports."""
        if self._pool is None:
            yield from self._run_here(function, tasks, progress)
            return
        tasks, pending, relayed = iter(tasks), set(), [0, 0]
        while True:
            while len(pending) < self.workers * TASKS_AHEAD and (task := next(tasks, None)) is not None:
                pending.add(self._pool.submit(function, task))
            if not pending:
                return
            done, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            self._relay(progress, relayed)
            for future in done:
                yield future.result()

    @staticmethod
    def _run_here(function, tasks, progress):
        global _sink
        _sink = progress
        try:
            for task in tasks:
                yield function(task)
        finally:
            _sink = None

    def _relay(self, progress, relayed: list) -> None:
        """Pass on what the workers reported since the last call."""
        with self._counter.get_lock():
            counts = list(self._counter)
        if progress is not None and counts != relayed:
            progress(counts[0] - relayed[0], counts[1] - relayed[1])
        relayed[:] = counts

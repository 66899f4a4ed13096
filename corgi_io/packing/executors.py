"""Where the pack's tasks run: this process, a local process pool, or a Dask cluster (dask_executor.py).

An executor runs a module-level task function (`unit_task.write_unit`) over small picklable tasks
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

Deaths and hangs: a pool worker says what it is on (the task's number, then the position of each
sample: `sample_marker`, hoisted out of a task's loop) and when it runs a user's code
(`running_user_code`, around each --map call) on a `WorkerBoard`.  A worker that dies (os._exit, a
segfault, an OOM kill) fails the pack with one line naming its sample (the driver asks the task:
``task.path``, and ``task.sample_at(position)`` once a task has marked one); one that runs user code
longer than `timeout` seconds is killed, and named the same way.
A pack that runs user code therefore uses a pool even for one worker (`isolate`): the code cannot
take the driver down with it, unreported.  On Dask, the cluster's retries handle lost workers.

`open_executor` picks one: a Dask client when given (imported only then), else the local pool.
"""
from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool

from corgi_io.errors import PackError
from corgi_io.processes import WorkerBoard, worker_pool

TASKS_AHEAD = 2    # tasks queued per worker process
POLL_SECONDS = 0.2  # how often the driver relays the workers' progress and checks their user code's time
RESUME_HINT = "no manifest written; finished shards are kept: rerun the same command to resume"

_sink = None   # where `report` goes in the driver running tasks itself: progress(samples, nbytes), or None
_board = None  # this pool worker's WorkerBoard (None: not a watched worker)


def report(samples: int, nbytes: int) -> None:
    """Tell the driver's progress display that `samples` samples of `nbytes` payload bytes were handled."""
    if _board is not None:
        _board.add(samples, nbytes)
    elif _sink is not None:
        _sink(samples, nbytes)


def sample_marker():
    """`mark(position)`, for a task to call as it starts each sample: the sample a dying worker was on is named
    (`task.sample_at(position)`).  Cheap, one shared int64; a no-op where no driver watches."""
    return _board.sample_marker() if _board is not None else _unwatched


def _unwatched(position: int) -> None:
    """The sample marker of a task that runs where no driver watches it."""


@contextlib.contextmanager
def running_user_code():
    """Mark the body as a user's code (a --map call): the driver stops a worker that stays in it too long."""
    board = _board
    if board is not None:
        board.user_code(time.monotonic_ns())
    try:
        yield
    finally:
        if board is not None:
            board.user_code(0)


def _start_watched(board: WorkerBoard) -> None:
    """A pool worker's start: what it is on and its progress go to its slot of `board`."""
    global _board
    _board = board
    board.claim()


def _run_watched(function, task, number: int):
    """function(task) in a pool worker, its `number` (the driver's) on the board."""
    _board.start(number)
    return function(task)


def open_executor(workers: int, client=None, *, isolate: bool = False, timeout: float | None = None):
    """The executor for `workers` local processes, or for the Dask cluster of `client` (a
    ``distributed.Client``; `workers` must then be left at 1: the cluster's workers write).  `isolate`: run the
    tasks in a pool even for one worker (they run user code); `timeout`: the most seconds a user's code may run
    on one sample in a local worker (None: no limit)."""
    if client is None:
        return LocalExecutor(workers, isolate=isolate, timeout=timeout)
    if workers != 1:
        raise PackError(f"workers={workers} is for the local pool; with a Dask client the cluster's workers "
                        "write the shards (size the cluster instead)")
    from corgi_io.packing.dask_executor import DaskExecutor

    return DaskExecutor(client)


class LocalExecutor:
    """Tasks in this process (`workers` <= 1, unless `isolate`) or in a pool of `workers` forked processes that die
    with it; a worker that dies, or stays longer than `timeout` seconds in user code, fails the run naming its
    sample (see the module docstring)."""

    def __init__(self, workers: int, *, isolate: bool = False, timeout: float | None = None):
        self.workers, self.isolate, self.timeout = max(1, workers), isolate, timeout
        self._pool = self._board = None
        self._numbers = itertools.count()  # the tasks' numbers, unique across runs on one pool
        self._running = {}    # number -> task, of the tasks submitted to the pool and not yet done
        self._stopped = None  # (pid, why) of the worker the driver killed, or None

    def __enter__(self):
        if self.workers > 1 or self.isolate:
            context = multiprocessing.get_context("fork")
            self._board = WorkerBoard(self.workers, context)
            self._pool = worker_pool(self.workers, _start_watched, (self._board,))
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
        try:
            yield from self._run_pooled(function, tasks, progress)
        except BrokenProcessPool as broken:  # from a result, or from a submit once the pool is broken
            raise self._died(broken) from None

    def _run_pooled(self, function, tasks, progress):
        # the board's totals grow for the life of the pool (a --dedup hash pass ran before): relay only this run's
        tasks, pending, relayed = zip(self._numbers, tasks), {}, list(self._board.progress())
        while True:
            while len(pending) < self.workers * TASKS_AHEAD and (item := next(tasks, None)) is not None:
                pending[self._pool.submit(_run_watched, function, item[1], item[0])] = item[0]
                self._running[item[0]] = item[1]
            if not pending:
                return
            done, _ = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            self._relay(progress, relayed)
            self._stop_overdue()
            for future in done:
                result = future.result()  # a BrokenProcessPool leaves the task in `_running`, for `_died`
                self._running.pop(pending.pop(future))
                yield result

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
        counts = list(self._board.progress())
        if progress is not None and counts != relayed:
            progress(counts[0] - relayed[0], counts[1] - relayed[1])
        relayed[:] = counts

    def _stop_overdue(self) -> None:
        """Kill the first worker in user code for longer than `timeout` seconds (its task then fails the pool)."""
        if not self.timeout or self._stopped is not None:
            return
        now = time.monotonic_ns()
        for pid, (since, _, _) in self._board.entries().items():
            if since and now - since > self.timeout * 1e9:
                self._stopped = pid, f"was stopped: the --map function ran longer than --map-timeout {self.timeout:g} s"
                os.kill(pid, signal.SIGKILL)
                return

    def _died(self, broken: BrokenProcessPool) -> PackError:
        """The one-line error of a broken pool: the worker that died (or was stopped), how, and its sample; else why
        the pool broke (a result that could not be loaded, a worker not yet seen to end)."""
        processes = list((getattr(self._pool, "_processes", None) or {}).values())  # before shutdown forgets them
        self._pool.shutdown(wait=True)
        self._pool = None
        pid, why = self._stopped or _culprit(processes, broken)
        if pid is None:
            return PackError(f"the worker pool broke: {why}; {RESUME_HINT}")
        return PackError(f"{self._sample_of(pid)}: worker process {pid} {why}; {RESUME_HINT}")

    def _sample_of(self, pid: int) -> str:
        """What worker `pid` was on, by its task: the sample it marked, else (none marked, or naming it failed: a
        folder unit reads its table) the task's path.  Runs while the pool's error is raised: it must not raise."""
        _, number, position = self._board.entries().get(pid, (0, -1, -1))
        task = self._running.get(number)
        if task is None:
            return "a task"
        try:
            return task.sample_at(position) if position >= 0 else task.path
        except Exception:  # any failure to name the sample (its table unreadable) falls back to the task's path
            return task.path


def _culprit(processes: list, broken: BrokenProcessPool) -> tuple:
    """(pid, how it ended) of the pool worker whose death broke the pool: the one that did not end by the SIGTERM
    the pool sends the others once one has died (else the first that ended); (None, the cause) when the pool broke
    on a result it could not load, or no worker is seen to have ended."""
    ended = [process for process in processes if process.exitcode is not None]
    if broken.__cause__ is not None or not ended:
        return None, _last_line(broken.__cause__ or broken)
    process = next((p for p in ended if p.exitcode != -signal.SIGTERM), ended[0])
    code = process.exitcode
    if code >= 0:
        return process.pid, f"exited with code {code} while packing it"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = str(-code)
    return process.pid, f"was killed by signal {name} while packing it"


def _last_line(error: BaseException) -> str:
    """The last line of `error`'s message: the exception that ends a worker's traceback (a _RemoteTraceback)."""
    lines = [line for line in str(error).splitlines() if line.strip(" '")]
    return lines[-1] if lines else type(error).__name__

"""Process pools whose workers never outlive the process that started them.

`corgi pack` and `corgi verify --jobs` fan work out to worker processes.  If the parent is
killed (kill -9, an OOM kill, a preempted job), orphaned workers would go on reading and
writing for minutes.  On Linux the workers are forked, so that they are children of this
process, and each asks the kernel (prctl PR_SET_PDEATHSIG) to SIGKILL it when its parent dies.

A `WorkerBoard` tells the parent what each worker is on (its task and sample, since when it runs a
user's code) and how far it got, so that a worker that dies (os._exit, a segfault, an OOM kill) or
hangs is named, and progress is shown, without a lock a killed worker could leave taken.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

from corgi_io.errors import PackError

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# A WorkerBoard slot: int64s, each written by one process only.  PID: its worker (0: a free slot); SINCE: since when
# it runs user code (time.monotonic_ns(), 0: it does not); SAMPLES, BYTES: what it reported; TASK, POSITION: the
# task it is on (a number the parent gave it, -1: none yet) and the sample in it (-1: none yet).
PID, SINCE, SAMPLES, BYTES, TASK, POSITION = range(6)
# int64s a slot: its fields, padded to 64 bytes.  RawArray memory is only 8-byte aligned, so a slot may straddle two
# cache lines and share one with its neighbour: the padding keeps false sharing to those edges, it does not prevent it.
SLOT = 8


def worker_pool(workers: int, initializer=None, initargs: tuple = ()) -> ProcessPoolExecutor:
    """A ProcessPoolExecutor of `workers` processes that die with this one; `initializer(*initargs)` runs after.

    The workers are forked now, not at the first task: a forked worker's RSS counts every resident page of this
    process's heap that it inherits, shared or not, so a pool opened before `corgi pack` walks its corpus keeps
    its workers free of the walk's columns (42 B per file of the driver's heap, issue 30).  A fork pool starts
    all its workers on its first submit; elsewhere (spawn) this starts one, at no cost to the others.
    """
    context = multiprocessing.get_context("fork") if sys.platform == "linux" else None
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))
    pool.submit(os.getpid)
    return pool


def _start_worker(parent_pid: int, initializer, initargs: tuple) -> None:
    die_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies, even by kill -9.

    Linux only (prctl PR_SET_PDEATHSIG).  The signal comes when the thread that forked the worker
    ends; a pool forks all its workers from the thread that first submits to it, and that thread
    outlives the pool.  A parent that died before prctl took effect sends no signal, so the parent
    pid is checked after it: a worker already orphaned exits at once.  Where prctl is refused (a
    seccomp sandbox) the worker still works; it only outlives a killed parent.
    """
    if sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


class WorkerBoard:
    """One slot per worker process of a pool, in shared memory (the fields above): each worker writes its own slot
    only, the parent reads them all.

    A worker claims a slot (`claim`, in the pool's initializer: the only use of the lock, before any task runs), then
    writes it as it goes (`start`, `sample_marker`, `user_code`, `add`); the parent sums the progress (`progress`)
    and reads the rest (`entries`) to name the sample of a worker that died or hangs.  Every field is one aligned
    int64, written and read whole, so the parent never waits on a worker, dead or alive.  Built before the pool,
    from its multiprocessing `context`.
    """

    def __init__(self, workers: int, context):
        self._memory, self._lock = context.RawArray("q", workers * SLOT), context.Lock()
        self._view = self._at = None

    def __getstate__(self) -> dict:
        return {"_memory": self._memory, "_lock": self._lock, "_view": None, "_at": None}

    def _slots(self) -> memoryview:
        if self._view is None:
            self._view = memoryview(self._memory).cast("B").cast("q")
        return self._view

    def claim(self) -> None:
        """Take the first free slot for this process (in a worker); PackError when every slot is taken (the board
        was built for fewer workers than the pool started): the other methods rely on a claimed slot."""
        view = self._slots()
        with self._lock:
            for at in range(0, len(view), SLOT):
                if view[at + PID] == 0:
                    view[at + TASK] = view[at + POSITION] = -1
                    view[at + PID] = os.getpid()
                    self._at = at
                    return
        raise PackError(f"worker process {os.getpid()}: no free slot on a board of {len(view) // SLOT} workers")

    def start(self, task: int) -> None:
        """Say that this worker starts task number `task` (its first sample not yet)."""
        self._view[self._at + POSITION] = -1
        self._view[self._at + TASK] = task

    def sample_marker(self):
        """`mark(position)`: say that this worker is on the sample at `position` of its task (called per sample)."""
        view, at = self._view, self._at + POSITION

        def mark(position: int) -> None:
            view[at] = position
        return mark

    def user_code(self, since: int) -> None:
        """Say that this worker runs user code since `since` (time.monotonic_ns(), the same clock in every process on
        Linux), or 0: it returned."""
        self._view[self._at + SINCE] = since

    def add(self, samples: int, nbytes: int) -> None:
        """Add to this worker's progress: `samples` samples of `nbytes` payload bytes handled."""
        view, at = self._view, self._at
        view[at + SAMPLES] += samples
        view[at + BYTES] += nbytes

    def progress(self) -> tuple:
        """(samples, bytes) that all the workers reported so far (in the parent)."""
        view = self._slots()
        return sum(view[SAMPLES::SLOT]), sum(view[BYTES::SLOT])

    def entries(self) -> dict:
        """{pid: (since when it runs user code or 0, task number, position)} of the claimed slots (in the parent)."""
        view = self._slots()
        return {view[at + PID]: (view[at + SINCE], view[at + TASK], view[at + POSITION])
                for at in range(0, len(view), SLOT) if view[at + PID]}

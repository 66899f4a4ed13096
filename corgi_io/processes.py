"""Process pools whose workers never outlive the process that started them.

`corgi pack` and `corgi verify --jobs` fan work out to worker processes.  If the parent is
killed (kill -9, an OOM kill, a preempted job), orphaned workers would go on reading and
writing for minutes.  On Linux the workers are forked, so that they are children of this
process, and each asks the kernel (prctl PR_SET_PDEATHSIG) to SIGKILL it when its parent dies.

A `WorkerBoard` tells the parent what each worker is on (the sample, and since when it runs a
user's code), so that a worker that dies (os._exit, a segfault, an OOM kill) or hangs is named.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import struct
import sys
from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
SLOT_BYTES = 1024     # one worker's slot of a WorkerBoard: a header, then what it is on (UTF-8, cut to fit)
_HEADER = struct.Struct("<qdI")  # pid (0: a free slot), since when it runs user code (0.0: it does not), text bytes


def worker_pool(workers: int, initializer=None, initargs: tuple = ()) -> ProcessPoolExecutor:
    """A ProcessPoolExecutor of `workers` processes that die with this one; `initializer(*initargs)` runs after."""
    context = multiprocessing.get_context("fork") if sys.platform == "linux" else None
    return ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))


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
    """One slot per worker process of a pool, in shared memory: its pid, what it is on, since when it runs user code.

    A worker claims a slot (`claim`, in the pool's initializer) and writes only that one (`note`, `user_code`);
    the parent reads them all (`entries`) to name the sample of a worker that died or hangs.  A read while a
    worker writes may see a torn text, but the parent reads a slot for a message only once its worker has
    stopped, or while it is stuck in user code.  Built before the pool, from its multiprocessing `context`.
    """

    def __init__(self, workers: int, context):
        self._memory, self._lock = context.RawArray("B", workers * SLOT_BYTES), context.Lock()
        self._view = self._at = None

    def __getstate__(self) -> dict:
        return {"_memory": self._memory, "_lock": self._lock, "_view": None, "_at": None}

    def _slots(self) -> memoryview:
        if self._view is None:
            self._view = memoryview(self._memory).cast("B")
        return self._view

    def claim(self) -> None:
        """Take the first free slot for this process (in a worker)."""
        view = self._slots()
        with self._lock:
            for at in range(0, len(view), SLOT_BYTES):
                if _HEADER.unpack_from(view, at)[0] == 0:
                    _HEADER.pack_into(view, at, os.getpid(), 0.0, 0)
                    self._at = at
                    return

    def note(self, text: str) -> None:
        """Say what this worker is on now (a sample, a task), for the parent's message if it dies."""
        if self._at is not None:
            data = text.encode("utf-8", "replace")[:SLOT_BYTES - _HEADER.size]
            start = self._at + _HEADER.size
            self._view[start:start + len(data)] = data
            struct.pack_into("<I", self._view, self._at + 16, len(data))

    def user_code(self, since: float) -> None:
        """Say that this worker runs user code since `since` (time.monotonic(), the same clock in every process on
        Linux), or 0.0: it returned."""
        if self._at is not None:
            struct.pack_into("<d", self._view, self._at + 8, since)

    def entries(self) -> dict:
        """{pid: (since when it runs user code or 0.0, what it is on)} of the claimed slots (in the parent)."""
        view, found = self._slots(), {}
        for at in range(0, len(view), SLOT_BYTES):
            pid, since, length = _HEADER.unpack_from(view, at)
            if pid:
                start = at + _HEADER.size
                found[pid] = (since, bytes(view[start:start + length]).decode("utf-8", "replace"))
        return found

"""Process pools whose workers never outlive the process that started them.

`corgi pack` and `corgi verify --jobs` fan work out to worker processes.  If the parent is
killed (kill -9, an OOM kill, a preempted job), orphaned workers would go on reading and
writing for minutes.  On Linux the workers are forked, so that they are children of this
process, and each asks the kernel (prctl PR_SET_PDEATHSIG) to SIGKILL it when its parent dies.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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

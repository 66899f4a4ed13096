"""Processes the tests start and watch: the corgi CLI as a subprocess, liveness, slow size functions."""
from __future__ import annotations

import itertools
import os
import signal
import subprocess
from pathlib import Path

CLI = "import sys; from corgi_io.cli import main; sys.exit(main())"
# A --size-fn that sleeps per file, so that a `corgi pack` subprocess runs long enough to be killed mid-way.
SLOW_SIZES = '''
import os, time

def tokens(path):
    time.sleep(float(os.environ.get("CORGI_TEST_SLEEP", "0")))
    with open(path, "rb") as f:
        return len(f.read().decode("utf-8").split())
'''


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_process(proc) -> None:
    """Terminate a server process (SIGTERM) and wait for it; SIGKILL if it has not exited in 5 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


TRAPPED = ("mkdir", "rename", "replace", "unlink", "rmdir", "fsync")  # the file-system operations a kill precedes


def pack_killed_before_op(args: list, op: int) -> bool:
    """Fork `corgi <args>` (a pack) that SIGKILLs itself just before its `op`-th file-system operation of TRAPPED
    (counted in the pack process only, not its workers); True if it was killed, False if it finished first."""
    from corgi_io.cli import main

    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 3
        try:
            me, count = os.getpid(), itertools.count(1)

            def trap(real):
                def call(*a, **k):
                    if os.getpid() == me and next(count) == op:
                        os.kill(me, signal.SIGKILL)
                    return real(*a, **k)
                return call
            for name in TRAPPED:
                setattr(os, name, trap(getattr(os, name)))
            main(args, standalone_mode=False)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0, f"the forked pack failed: {status}"
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def children(pid: int) -> list:
    """Live (not zombie) processes whose parent is `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found

"""Processes the tests start and watch: the corgi CLI as a subprocess, liveness, slow size functions."""
from __future__ import annotations

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

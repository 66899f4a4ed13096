"""Smoke test of bench/remote_cache.py: a small run over nginx prints the remote-bytes and samples/s lines."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_nginx

BENCH = Path(__file__).parents[2] / "bench" / "remote_cache.py"


@pytest.mark.slow
def test_remote_cache_bench_small_run(tmp_path):
    require_nginx()
    result = subprocess.run([sys.executable, BENCH, "--n", "300", "--block-samples", "16", "--epochs", "3", "--rounds", "1",
                             "--workdir", tmp_path], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(BENCH.parents[1])})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    remote = [re.match(r"cache (belady|lru) +epoch (\d)  remote +([\d.]+) MB +([\d.]+)x pack +([\d.]+)x lru", line)
              for line in lines if " remote " in line]
    assert [(m[1], m[2]) for m in remote] == [(p, e) for e in "12" for p in ("belady", "lru")]
    assert all(("goals" in line) == line.startswith("cache belady") for line in lines if " remote " in line)
    rates = [line.split()[1] for line in lines if "samples/s" in line]
    assert rates == ["none", "belady", "lru"]

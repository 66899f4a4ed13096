"""Smoke test of bench/latency.py: a small run prints one line per (delay, mode, reader), with its requests, the
server's CPU and corgi's ratios against the named baselines."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_nginx
from helpers.s3_server import missing_packages

BENCH = Path(__file__).parents[2] / "bench" / "latency.py"
LINE = re.compile(r"latency +(\d+) ms  (one process|DataLoader 2 workers) +(corgi http|corgi s3|litdata s3|webdataset "
                  r"http) +(\d+) samples/s +(\d+) requests  server CPU +[\d.]+ s(.*)")


@pytest.mark.slow
def test_latency_bench_small_run(tmp_path):
    require_nginx()
    if missing_packages():
        pytest.skip(missing_packages())
    result = subprocess.run([sys.executable, BENCH, "--n", "60", "--rounds", "1", "--workers", "0", "--delay-ms", "20",
                             "--readers", "corgi http,corgi s3,webdataset http", "--workdir", tmp_path],
                            capture_output=True, text=True, timeout=240,
                            env={**os.environ, "PYTHONPATH": str(BENCH.parents[1])})
    assert result.returncode == 0, result.stderr
    lines = [LINE.fullmatch(line) for line in result.stdout.splitlines() if line.startswith("latency")]
    assert all(lines) and [(m[1], m[3]) for m in lines] == [
        (delay, reader) for delay in ("0", "20") for reader in ("corgi http", "corgi s3", "webdataset http")]
    by = {(m[1], m[3]): m for m in lines}
    assert all(int(m[5]) >= 1 for m in lines)  # counted at the proxy
    assert "vs best peer (webdataset http)" in by[("0", "corgi http")][6]
    assert "vs corgi http at 0 ms" in by[("0", "corgi s3")][6]
    assert "vs corgi s3 at 0 ms (goal >= 0.8x" in by[("20", "corgi s3")][6]
    assert by[("0", "webdataset http")][6] == ""

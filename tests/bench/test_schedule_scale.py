"""Smoke test of bench/plan_scale.py: a small run prints one line per (N, W, balance) with its target marks,
and count balance reads no per-sample sizes."""
from __future__ import annotations

import pytest

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "plan_scale.py"


@pytest.mark.slow
def test_plan_scale_small_run():
    result = subprocess.run([sys.executable, BENCH, "--samples", "3e4", "2e5", "--world-sizes", "4", "32",
                             "--workers", "2", "--block-samples", "256"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("plan_scale N=")]
    assert len(lines) == 2 * 2 * 2
    for line in lines:
        assert re.search(r"per-rank [\d.]+ s \(<= [\d.]+ s (met|MISSED);", line)
        assert re.search(r"per-worker [\d.]+ s \(<= 0.2 s (met|MISSED)\)", line)
        assert re.search(r"peak [\d,]+ MB \(<= 1 GB (met|MISSED)\)", line)
        read, blocks = map(lambda x: int(x.replace(",", "")),
                           re.search(r"sizes read for ([\d,]+) of ([\d,]+) blocks", line).groups())
        if " count " in line:
            assert read == 0 and "all-ranks plan of before" in line
        else:
            assert 0 < read <= blocks
            balanced, by_count = map(float, re.search(r"size max/mean ([\d.]+) \(count ([\d.]+)\)", line).groups())
            assert balanced <= min(by_count, 1.02)

"""Smoke test of bench/repack.py: a small run prints one line per contender, with its ratio against litdata.optimize."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "repack.py"


@pytest.mark.slow
def test_repack_bench_small_run(tmp_path):
    pytest.importorskip("webdataset")
    pytest.importorskip("litdata")
    result = subprocess.run([sys.executable, BENCH, "--n", "40", "--per-tar", "10", "--rounds", "1",
                             "--workdir", tmp_path], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# 40 JPEG+caption samples") and "in 4 tars of 10" in lines[0]
    results = [re.fullmatch(r"repack (.+?) +\d+ samples/s +[\d.]+ MB/s ratio +[\d.]+x vs litdata\.optimize --workers 2",
                            line) for line in lines[1:4]]
    assert all(results), lines
    assert [match[1] for match in results] == ["corgi pack --workers 1", "corgi pack --workers 2",
                                               "litdata.optimize --workers 2"]
    assert re.fullmatch(r"target corgi pack --workers 2 vs litdata\.optimize --workers 2: +[\d.]+x "
                        r"\(target >= 1\.5x: (met|NOT met)\)", lines[4]), lines[4]
    assert re.fullmatch(r"target corgi pack --workers 2 vs corgi pack --workers 1: +[\d.]+x \(no target\)",
                        lines[5]), lines[5]
    assert len(lines) == 6

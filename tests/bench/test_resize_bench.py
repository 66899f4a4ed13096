"""Smoke test of bench/resize.py: a small run prints one line per contender and picture set, with its ratio."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "resize.py"


@pytest.mark.slow
def test_resize_bench_small_run():
    result = subprocess.run([sys.executable, BENCH, "--n", "10", "--rounds", "1", "--large-side", "800"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and all(re.search(r": [\d.]+ ms/image, [\d.]+x the Pillow loop$", line) for line in lines)
    assert [line.split(" n=")[0] for line in lines] == ["resize 500x375 -> 256"] * 2 + ["resize 800x600 -> 256"] * 2

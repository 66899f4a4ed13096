"""Smoke test of bench/balance.py: a small run prints the plan lines per case with target markers."""
from __future__ import annotations

import pytest

import re
import subprocess
import sys
from pathlib import Path

from helpers.corpus_factory import make_image_corpus

BENCH = Path(__file__).parents[2] / "bench" / "balance.py"


@pytest.mark.slow
def test_balance_bench_small_run(tmp_path, corgi):
    make_image_corpus(tmp_path / "src", 24, seed=1)
    assert corgi("pack", tmp_path / "src", tmp_path / "out", "--block-samples", "4", "--workers", "1").exit_code == 0
    result = subprocess.run([sys.executable, BENCH, "--samples", "4096", "--world-sizes", "2", "4",
                             "--batch-size", "8", "--dataset", tmp_path / "out"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("balance ") and " W=" in line]
    assert len(lines) == 3 * 2 * 3  # (video, text, dataset) x (W=2, W=4) x (count, count+batches, size+batches)
    for case in ("video", "text", "dataset"):
        for w in (2, 4):
            count, count_batches, size = (line for line in lines if line.split()[1:3] == [case, f"W={w}"])
            assert "count " in count and "baseline" in count and "met" not in count
            assert "count+batches" in count_batches and "met" not in count_batches
            assert re.search(r"epoch max/mean [\d.]+ \(<= 1\.02 (met|MISSED)\)", size)
            assert re.search(r"step p95 [\d.]+ \(<= 1\.1 (met|MISSED)\)", size)
            # size balance not slower than count per step: at this small scale, within which batches meet
            assert float(re.search(r"\(([\d.]+)x count\+batches: >= 1 (met|MISSED)\)", size).group(1)) >= 0.97
            assert ("(>= 1.2x" in size) == (case == "video")
    video = next(line for line in lines if line.split()[1:4] == ["video", "W=2", "N=4,096"] and "size+batches" in line)
    assert float(re.search(r"time ([\d.]+)x faster", video).group(1)) > 1.1
    dynamic = [line for line in result.stdout.splitlines() if line.startswith("dynamic ")]
    assert len(dynamic) == 3 * 3  # (iid, iid in blocks of 4, blocky) x (count, size+batches, dynamic+batches)
    for line in dynamic:
        assert re.search(r"W=2 .* epoch [\d.]+x ideal.* steps [\d.]+x ideal", line)
        assert ("(<= 1.05 " in line) == ("dynamic+batches" in line)

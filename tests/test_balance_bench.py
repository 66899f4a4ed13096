"""Smoke test of bench/balance.py: a small run prints the three plan lines per case with target markers."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from corpus_factory import make_image_corpus

BENCH = Path(__file__).parent.parent / "bench" / "balance.py"


def test_balance_bench_small_run(tmp_path, corgi):
    make_image_corpus(tmp_path / "src", 24, seed=1)
    assert corgi("pack", tmp_path / "src", tmp_path / "out", "--block-samples", "4", "--workers", "1").exit_code == 0
    result = subprocess.run([sys.executable, BENCH, "--samples", "4096", "--world-sizes", "2", "4",
                             "--batch-size", "8", "--dataset", tmp_path / "out"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if " W=" in line]
    assert len(lines) == 3 * 2 * 3  # (video, text, dataset) x (W=2, W=4) x (count, size, size+batches)
    for case in ("video", "text", "dataset"):
        for w in (2, 4):
            count, size, batches = (line for line in lines if line.split()[1:3] == [case, f"W={w}"])
            assert "count " in count and "baseline" in count and "met" not in count
            assert re.search(r"epoch max/mean [\d.]+ \(<= 1\.02 (met|MISSED)\)", size)
            assert re.search(r"step p95 [\d.]+ \(<= 1\.1 (met|MISSED)\)", batches)
            assert ("(>= 1.2x" in batches) == (case == "video")
    video_batches = next(line for line in lines if line.split()[1:4] == ["video", "W=2", "N=4,096"]
                         and "size+batches" in line)
    assert float(re.search(r"time ([\d.]+)x faster", video_batches).group(1)) > 1.1

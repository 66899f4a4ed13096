"""Smoke test of bench/pack_resize.py: a small run prints litdata's line, corgi's with its ratio, and the target."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "pack_resize.py"


@pytest.mark.slow
def test_pack_resize_bench_small_run(tmp_path):
    pytest.importorskip("litdata", reason="pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 "
                                          "requests")
    result = subprocess.run([sys.executable, BENCH, "--n", "12", "--rounds", "1", "--workdir", tmp_path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    comment, fixed, *lines, target = result.stdout.splitlines()
    assert comment.startswith("# 12 JPEGs 500x375/375x500") and "median of 1 interleaved rounds" in comment
    assert re.fullmatch(r"# litdata.optimize\(num_workers=2\) of 2 inputs only .+: [\d.]+ s, of its median [\d.]+ s", fixed)
    names = [re.match(r"pack-resize (.+?) +[\d.]+ images/s +[\d.]+ MB/s ratio +[\d.]+x vs litdata", line).group(1)
             for line in lines]
    assert names == ["litdata.optimize(num_workers=2)", "corgi pack --image-max-side 256 --workers 2"]
    assert " ratio  1.00x vs " in lines[0]
    assert re.fullmatch(r"target corgi pack .+ vs litdata.optimize\(num_workers=2\): +[\d.]+x "
                        r"\(target >= 1.5x: (met|NOT met)\)", target)
    assert not list(tmp_path.glob("out*")), "the packs of the rounds are removed"

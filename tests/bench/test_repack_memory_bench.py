"""Smoke test of bench/pack_memory.py --from-tars: driver peaks of two tar repacks, the growth per sample, the target."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "pack_memory.py"


@pytest.mark.slow
def test_repack_memory_bench_small_run(tmp_path):
    pytest.importorskip("webdataset")
    result = subprocess.run([sys.executable, BENCH, "--from-tars", "--sizes", "200", "1000", "--per-tar", "100",
                             "--workdir", tmp_path], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("# corgi pack --from wds --workers 1, tiny samples"), lines
    peaks = r"peak RSS +[\d.]+ MiB  peak anonymous +[\d.]+ MiB  pack +[\d.]+ s"
    assert re.fullmatch(rf"repack_memory +200 samples  {peaks}  \(baseline; corpus written in \d+ s\)", lines[1])
    assert re.fullmatch(rf"repack_memory +1,000 samples  {peaks}  growth vs 200 samples: RSS +-?[\d.]+ B/sample, "
                        r"anonymous +-?[\d.]+ B/sample; target <= 64 B/sample: (met|NOT met) \(anonymous\), "
                        r"(met|NOT met) \(RSS\)", lines[2]), lines[2]
    assert not list(tmp_path.glob("*.complete-*"))  # the corpora and their markers are gone without --keep

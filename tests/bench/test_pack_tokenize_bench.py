"""Smoke test of bench/pack_tokenize.py: a small run prints litdata's line and corgi's, in tokens/s, with ratios;
and its corpus is the same for the same seed."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "pack_tokenize.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("pack_tokenize_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_text_corpus_is_deterministic_and_a_few_hundred_words(tmp_path):
    bench = load_bench()
    texts = [sorted(p.read_text() for p in bench.make_text_folder(tmp_path / f"t{i}", 6).glob("class_*/*.txt"))
             for i in range(2)]
    assert texts[0] == texts[1] and len(texts[0]) == 6
    assert all(150 <= len(text.split()) <= 450 and text.endswith(".\n") for text in texts[0])


@pytest.mark.slow
def test_pack_tokenize_bench_small_run(tmp_path):
    pytest.importorskip("tokenizers", reason="pip install 'corgi-io[text]'")
    pytest.importorskip("litdata", reason="pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 "
                                          "requests")
    result = subprocess.run([sys.executable, BENCH, "--n", "40", "--rounds", "1", "--workdir", tmp_path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    comment, fixed, *lines = result.stdout.splitlines()
    assert re.fullmatch(r"# litdata.optimize\(num_workers=2\) of 2 inputs only .+: [\d.]+ s, of its median [\d.]+ s", fixed)
    assert re.match(r"# 40 text files, [\d.]+ MB, \d+ tokens \(BPE, 2000 ids", comment)
    names = [re.fullmatch(r"pack-tokenize (.+?) +\d+ tokens/s +\d+ docs/s ratio +[\d.]+x vs litdata.optimize"
                          r"\(num_workers=2\)", line).group(1) for line in lines]
    assert names == ["litdata.optimize(num_workers=2)", "corgi pack --tokenizer FILE --workers 2"]
    assert " ratio  1.00x vs " in lines[0]

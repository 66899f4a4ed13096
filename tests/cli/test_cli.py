"""The `corgi` command line: bad input, --strict, empty and missing SOURCE, stats, import hygiene."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from corgi_io.manifest import open_manifest
from helpers.corpus_factory import (write_garbage_video, write_image, write_non_utf8_text, write_text,
                            write_truncated_jpeg, write_video)

BAD = {  # relpath -> words expected in the reason
    "cat/broken.jpg": ("JPEG",),
    "dog/garbage.mp4": ("video",),
    "bird/latin1.txt": ("UTF-8",),
}


def make_bad_corpus(root: Path) -> dict:
    """Good files of every kind plus one broken file of every kind; returns {good relpath: size}."""
    good = {
        "cat/ok.jpg": write_image(root / "cat/ok.jpg", 30, 20, seed=1),
        "cat/fine.png": write_image(root / "cat/fine.png", 12, 40, seed=2),  # not ok.png: a field of cat/ok
        "dog/ok.avi": write_video(root / "dog/ok.avi", 4),
        "bird/ok.txt": write_text(root / "bird/ok.txt", 9),
    }
    write_truncated_jpeg(root / "cat/broken.jpg")
    write_garbage_video(root / "dog/garbage.mp4")
    write_non_utf8_text(root / "bird/latin1.txt")
    return good


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("fmt,workers", [("wds", 1), ("wds", 2), ("tfrecord", 1)])
def test_bad_inputs_are_skipped_with_warning_and_recorded(tmp_path, corgi, fmt, workers):
    good = make_bad_corpus(tmp_path / "src")
    out = tmp_path / "out"
    result = corgi("pack", tmp_path / "src", out, "--format", fmt, "--workers", workers, "--block-samples", "2")
    assert result.exit_code == 0, result.output
    for rel, words in BAD.items():
        warning = [line for line in result.stderr.splitlines() if rel in line]
        assert len(warning) == 1, result.stderr
        assert "warning" in warning[0].lower() and all(w in warning[0] for w in words), warning[0]
    m = open_manifest(out)
    assert {s["path"]: s["reason"] for s in list(m.skip_records())}.keys() == BAD.keys()
    for entry in list(m.skip_records()):
        assert all(w in entry["reason"] for w in BAD[entry["path"]]), entry
    assert m.num_samples == len(good)
    assert sorted(m.samples.size.tolist()) == sorted(good.values())
    assert corgi("verify", out).exit_code == 0
    stats = json.loads(corgi("stats", out, "--json").stdout)
    assert stats["skipped"] == len(BAD) and stats["samples"] == len(good)


@pytest.mark.parametrize("bad", sorted(BAD))
def test_strict_fails_on_each_kind_of_bad_input(tmp_path, corgi, bad):
    src = tmp_path / "src"
    make_bad_corpus(src)
    for other in BAD:
        if other != bad:
            (src / other).unlink()
    out = tmp_path / "out"
    result = corgi("pack", src, out, "--strict", "--workers", "1")
    assert result.exit_code != 0
    line = one_line(result)
    assert bad in line and all(w in line for w in BAD[bad])
    assert not (out / "manifest.json").exists() and not (out / "manifest.npz").exists()
    assert not list(out.glob(".shard-*")), "a temporary shard was left behind"


@pytest.mark.slow
def test_strict_with_workers(tmp_path, corgi):
    make_bad_corpus(tmp_path / "src")
    out = tmp_path / "out"
    result = corgi("pack", tmp_path / "src", out, "--strict", "--workers", "2")
    assert result.exit_code != 0
    assert any(bad in one_line(result) for bad in BAD)
    assert not (out / "manifest.json").exists()


def test_strict_then_fixed_corpus_packs(tmp_path, corgi):
    src = tmp_path / "src"
    good = make_bad_corpus(src)
    out = tmp_path / "out"
    assert corgi("pack", src, out, "--strict", "--workers", "1").exit_code != 0
    for rel in BAD:
        (src / rel).unlink()
    refused = corgi("pack", src, out, "--strict", "--workers", "1")  # the corpus changed under the partial pack
    assert refused.exit_code != 0 and "corpus" in one_line(refused) and "--overwrite" in one_line(refused)
    result = corgi("pack", src, out, "--strict", "--workers", "1", "--overwrite")
    assert result.exit_code == 0, result.output
    assert open_manifest(out).num_samples == len(good)


def test_empty_folder(tmp_path, corgi):
    (tmp_path / "src").mkdir()
    result = corgi("pack", tmp_path / "src", tmp_path / "out")
    assert result.exit_code != 0
    line = one_line(result)
    assert str(tmp_path / "src") in line and "empty" in line
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_folder_of_unknown_files_is_empty(tmp_path, corgi):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "data.xyz").write_bytes(b"1")
    (tmp_path / "src" / "a" / ".hidden.jpg").write_bytes(b"1")
    result = corgi("pack", tmp_path / "src", tmp_path / "out")
    assert result.exit_code != 0
    *warnings, line = result.stderr.strip().splitlines()
    assert "empty" in line and "skipped" in line
    assert len(warnings) == 2 and all("warning: skipped a/" in w for w in warnings)  # each skip warned


def test_empty_listing(tmp_path, corgi):
    listing = tmp_path / "list.csv"
    listing.write_text("path,label\n")
    result = corgi("pack", listing, tmp_path / "out")
    assert result.exit_code != 0
    assert str(listing) in one_line(result) and "empty" in one_line(result)


def test_missing_source(tmp_path, corgi):
    result = corgi("pack", tmp_path / "nowhere", tmp_path / "out")
    assert result.exit_code != 0
    line = one_line(result)
    assert str(tmp_path / "nowhere") in line and "no such file" in line.lower()
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_missing_source_console_script(tmp_path):
    proc = subprocess.run(["corgi", "pack", str(tmp_path / "nowhere"), str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert str(tmp_path / "nowhere") in proc.stderr and "Traceback" not in proc.stderr


def test_source_that_is_neither_folder_nor_listing(tmp_path, corgi):
    write_image(tmp_path / "one.jpg", 8, 8)
    result = corgi("pack", tmp_path / "one.jpg", tmp_path / "out")
    assert result.exit_code != 0
    assert "one.jpg" in one_line(result)


def test_listing_naming_missing_files(tmp_path, corgi):
    write_text(tmp_path / "a.txt", 3)
    listing = tmp_path / "list.jsonl"
    listing.write_text(json.dumps({"path": "a.txt", "label": "x"}) + "\n" + json.dumps({"path": "gone.txt", "label": "x"}) + "\n")
    out = tmp_path / "out"
    result = corgi("pack", listing, out, "--workers", "1")
    assert result.exit_code == 0, result.output
    m = open_manifest(out)
    assert m.num_samples == 1
    assert [s["path"] for s in list(m.skip_records())] == ["gone.txt"]


# --- corgi stats --------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_stats_json_values(packed_mixed, mixed_corpus, corgi, fmt):
    _, expected = mixed_corpus
    out = packed_mixed(fmt)
    result = corgi("stats", out, "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    m = open_manifest(out)
    assert stats["samples"] == len(expected)
    assert stats["shards"] == len(m.shards) == len(list(out.glob(f"shard-*.{'tar' if fmt == 'wds' else 'tfrecord'}")))
    assert stats["blocks"] == len(m.blocks)
    assert stats["bytes"] == sum((out / sh.path).stat().st_size for sh in m.shards)
    sizes = np.array([e.size for e in expected.values()], dtype=np.float64)
    size = stats["size"]
    assert size["min"] == sizes.min() and size["max"] == sizes.max()
    assert size["mean"] == pytest.approx(sizes.mean(), abs=1e-3)
    for q in (50, 90, 99):
        assert size[f"p{q}"] == pytest.approx(np.percentile(sizes, q), abs=1e-3)
    for kind in ("image", "video", "text"):
        ks = np.array([e.size for e in expected.values() if e.kind == kind], dtype=np.float64)
        assert stats["size_by_kind"][kind]["max"] == ks.max()
        assert stats["size_by_kind"][kind]["p50"] == pytest.approx(np.percentile(ks, 50), abs=1e-3)


def test_stats_text_has_counts_and_histogram(packed_mixed, mixed_corpus, corgi):
    _, expected = mixed_corpus
    out = packed_mixed("wds")
    result = corgi("stats", out)
    assert result.exit_code == 0, result.output
    text = result.stdout
    m = open_manifest(out)
    assert f"{len(expected)} samples" in text and f"{len(m.shards)}" in text
    assert "histogram" in text.lower()
    bars = [line for line in text.splitlines() if re.search(r"#+\s+\d+\s*$", line)]
    assert bars, text
    counts = [int(re.search(r"(\d+)\s*$", line).group(1)) for line in text.splitlines()
              if re.match(r"^\s*[\d.]+[kMG]?\s+-\s+[\d.]+[kMG]?\s", line)]
    assert sum(counts) == len(expected)


def test_stats_plot_writes_png(packed_mixed, corgi, tmp_path):
    png = tmp_path / "sizes.png"
    result = corgi("stats", packed_mixed("wds"), "--plot", png)
    assert result.exit_code == 0, result.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width > 100 and image.height > 100


def test_stats_of_missing_dataset(tmp_path, corgi):
    result = corgi("stats", tmp_path / "nothing-here")
    assert result.exit_code != 0
    assert "manifest.json" in one_line(result)


# --- import hygiene -----------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_pack_stats_verify_and_both_formats_do_not_import_torch():
    code = ("import sys, corgi_io.cli, corgi_io.packing, corgi_io.report.stats, corgi_io.report.verify, corgi_io.report.plan; "
            "from corgi_io import open_manifest, pack, PackOptions, verify; "
            "from corgi_io.formats import get_format; get_format('wds'); get_format('tfrecord'); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_corgi_help_lists_commands():
    proc = subprocess.run(["corgi", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for command in ("pack", "stats", "verify", "plan"):
        assert command in proc.stdout

"""Pack's input limits and bounded sizing (issue 16): image bombs (`--max-pixels`, also in `corgi verify`),
oversized files (`--max-sample-bytes`), text token counts in bounded memory, names read back unmapped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from corgi_io.errors import BadInput, PackError
from corgi_io.manifest import DEFAULT_MAX_PIXELS, open_manifest
from corgi_io.packing import PackOptions
from corgi_io.packing.sources import folder
from corgi_io.packing.sizing import MAX_WHITESPACE, text_tokens
from corgi_io.packing.spool import SpooledStrings
from helpers.corpus_factory import png_claiming, write_image, write_text

WHITESPACE = [chr(code) for code in range(MAX_WHITESPACE + 1) if chr(code).isspace()]
MULTIBYTE = ["é", "ñ", "日", "本", "😀", "\u00a0\u0301", "x"]  # 2, 3 and 4 UTF-8 bytes; combining marks


@pytest.fixture
def bomb_corpus(tmp_path):
    """SOURCE with a 60000x60000 PNG bomb, an 8x8 PNG and a 5-token text; returns its path."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "bomb.png").write_bytes(png_claiming(60000, 60000))
    write_image(src / "a" / "ok.png", 8, 8)
    (src / "a" / "note.txt").write_text("one two three four five", encoding="utf-8")
    return src


# --- text tokens, a chunk at a time ----------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.sampled_from(WHITESPACE) | st.sampled_from(MULTIBYTE) | st.characters(), max_size=60)
       .map("".join), chunk=st.integers(1, 9))
def test_token_count_is_str_split_whatever_the_chunks(text, chunk):
    data = text.encode("utf-8", "surrogatepass")
    try:
        expected = len(data.decode("utf-8").split())
    except UnicodeDecodeError:  # a lone surrogate: not UTF-8 either way
        with pytest.raises(BadInput):
            text_tokens(data, chunk)
        return
    assert text_tokens(data, chunk) == expected


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=40) | st.lists(st.sampled_from([b"\xe6\x97\xa5", b"\xf0\x9f", b" ", b"\x85", b"a",
                                                                 b"\xc2\x85", b"\xe3\x80\x80", b"\xff"])).map(b"".join),
       chunk=st.integers(1, 7))
def test_token_count_rejects_what_utf8_rejects_naming_the_same_byte(data, chunk):
    try:
        expected = len(data.decode("utf-8").split())
    except UnicodeDecodeError as exc:
        with pytest.raises(BadInput, match=rf"^not UTF-8 text \(byte {exc.start}\)$"):
            text_tokens(data, chunk)
    else:
        assert text_tokens(data, chunk) == expected


def test_every_whitespace_character_is_below_the_table_end():
    assert not [code for code in range(MAX_WHITESPACE + 1, sys.maxunicode + 1) if chr(code).isspace()]
    assert chr(MAX_WHITESPACE).isspace()


@pytest.mark.parametrize("word", ["ab", "日本"])
def test_token_count_holds_a_few_chunks_not_the_words(word):
    data = (word + " ").encode("utf-8") * (40_000_000 // len((word + " ").encode("utf-8")))
    tracemalloc.start()
    try:
        count = text_tokens(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == len(data) // len((word + " ").encode("utf-8"))
    assert peak < 24 << 20, f"counting {len(data) >> 20} MiB of text peaked at {peak >> 20} MiB"


PEAK_OF_CHILD = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)")


@pytest.mark.slow
def test_packing_a_large_text_takes_less_than_twice_its_size(tmp_path):
    (tmp_path / "src" / "a").mkdir(parents=True)
    text = tmp_path / "src" / "a" / "big.txt"
    text.write_bytes("naïve tokens, 日本語 and\u3000more\n".encode("utf-8") * 3_000_000)  # 108 MB, 5 tokens a line
    peak = int(subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, "corgi", "pack", str(tmp_path / "src"),
                               str(tmp_path / "out"), "--workers", "1"], check=True, capture_output=True).stdout)
    assert peak < 2 * text.stat().st_size, f"peak RSS {peak >> 20} MiB for a {text.stat().st_size >> 20} MiB text"
    assert open_manifest(tmp_path / "out").samples.size.tolist() == [5 * 3_000_000]


# --- images: --max-pixels -------------------------------------------------------------------------

def test_the_pixel_limit_is_pillows_and_the_loaders():
    assert DEFAULT_MAX_PIXELS == Image.MAX_IMAGE_PIXELS == 89_478_485
    assert PackOptions().max_pixels == DEFAULT_MAX_PIXELS
    decode = pytest.importorskip("corgi_io.loaders.decode")
    assert decode.DEFAULT_MAX_PIXELS == DEFAULT_MAX_PIXELS


def test_an_image_bomb_is_skipped_with_its_reason(bomb_corpus, tmp_path, corgi):
    result = corgi("pack", bomb_corpus, tmp_path / "out", "--workers", "1")
    assert result.exit_code == 0, result.output
    m = open_manifest(tmp_path / "out")
    assert sorted(m.keys()) == ["a/note", "a/ok"]
    reason = "image of 3,600,000,000 pixels, above the limit of 89,478,485 (--max-pixels)"
    assert list(m.skip_records()) == [{"path": "a/bomb.png", "reason": reason}]
    assert f"skipped a/bomb.png: {reason}" in result.stderr
    assert m.options["max_pixels"] == DEFAULT_MAX_PIXELS


def test_an_image_bomb_fails_the_pack_under_strict(bomb_corpus, tmp_path, corgi):
    result = corgi("pack", bomb_corpus, tmp_path / "out", "--workers", "1", "--strict")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "bomb.png" in line and "--max-pixels" in line
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_max_pixels_is_part_of_the_pack_identity(bomb_corpus, tmp_path, corgi):
    write_image(bomb_corpus / "a" / "wide.png", 20, 20)
    assert corgi("pack", bomb_corpus, tmp_path / "out", "--workers", "1", "--max-pixels", "100").exit_code == 0
    m = open_manifest(tmp_path / "out")
    assert sorted(m.keys()) == ["a/note", "a/ok"] and m.options["max_pixels"] == 100
    assert {entry["path"] for entry in list(m.skip_records())} == {"a/bomb.png", "a/wide.png"}
    again = corgi("pack", bomb_corpus, tmp_path / "out", "--workers", "1", "--max-pixels", "400")
    assert again.exit_code == 1 and "max_pixels" in again.stderr


SIZE_MODULE = "def one(path):\n    return 1\n"


def test_a_size_function_does_not_lift_the_pixel_limit(bomb_corpus, tmp_path, corgi, write_user_module):
    write_user_module("corgi_test_limit_sizes", SIZE_MODULE)
    result = corgi("pack", bomb_corpus, tmp_path / "out", "--workers", "1", "--size-fn", "corgi_test_limit_sizes:one")
    assert result.exit_code == 0, result.output
    m = open_manifest(tmp_path / "out")
    assert sorted(m.keys()) == ["a/note", "a/ok"] and m.samples.size.tolist() == [1, 1]
    assert [entry["path"] for entry in list(m.skip_records())] == ["a/bomb.png"]


def test_verify_max_pixels_reports_images_recorded_above_it(bomb_corpus, tmp_path, corgi):
    out = tmp_path / "out"
    assert corgi("pack", bomb_corpus, out, "--workers", "1", "--max-pixels", "0").exit_code == 0
    m = open_manifest(out)
    assert m.options["max_pixels"] is None and m.num_samples == 3
    assert corgi("verify", out).exit_code == 0  # without the option, sizes are not checked
    result = corgi("verify", out, "--max-pixels", "10", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    index = {key: i for i, key in enumerate(m.keys())}
    shard = m.shards[0].path
    expected = sorted(({"shard": shard, "offset": int(m.samples.offset[index[key]]), "key": key,
                        "message": f"sample {key!r}: image of {pixels:,} pixels, above the limit of 10 (--max-pixels)"}
                       for key, pixels in (("a/bomb", 3_600_000_000), ("a/ok", 64))), key=lambda p: p["offset"])
    assert report["problems"] == expected and report["total_problems"] == 2  # the 5-token text is no image
    assert report["samples_checked"] == 3
    lines = corgi("verify", out, "--max-pixels", str(DEFAULT_MAX_PIXELS)).stderr.strip().splitlines()
    offset = int(m.samples.offset[index["a/bomb"]])
    assert lines == [(f"corgi verify: {shard}: byte offset {offset}: sample 'a/bomb': image of 3,600,000,000 pixels, "
                      f"above the limit of {DEFAULT_MAX_PIXELS:,} (--max-pixels)"),
                     "corgi verify: 1 problem; 3 samples checked"]


@pytest.mark.slow
def test_verify_max_pixels_is_the_same_with_jobs(bomb_corpus, tmp_path, corgi):
    out = tmp_path / "out"
    assert corgi("pack", bomb_corpus, out, "--workers", "1", "--max-pixels", "0", "--block-samples", "1",
                 "--shard-bytes", "1k").exit_code == 0
    assert len(open_manifest(out).shards) == 3
    reports = [corgi("verify", out, "--max-pixels", "10", "--json", "--jobs", jobs).stdout for jobs in ("1", "2")]
    assert reports[0] == reports[1] and json.loads(reports[0])["total_problems"] == 2


# --- files: --max-sample-bytes --------------------------------------------------------------------

def test_a_file_above_max_sample_bytes_is_skipped_unread(tmp_path, corgi, monkeypatch):
    write_text(tmp_path / "src" / "a" / "small.txt", 10)
    (tmp_path / "src" / "a" / "large.txt").write_text("word " * 400, encoding="utf-8")  # 2,000 bytes
    read = []
    real_read = folder.read_regular_file
    monkeypatch.setattr(folder, "read_regular_file", lambda path, most: read.append(path) or real_read(path, most))
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--workers", "1", "--max-sample-bytes", "1k")
    assert result.exit_code == 0, result.output
    m = open_manifest(tmp_path / "out")
    reason = "2,000 bytes, above the limit of 1,024 (--max-sample-bytes)"
    assert m.keys() == ["a/small"] and list(m.skip_records()) == [{"path": "a/large.txt", "reason": reason}]
    assert f"skipped a/large.txt: {reason}" in result.stderr
    assert [os.path.basename(path) for path in read] == ["small.txt"]
    assert m.options["max_sample_bytes"] == 1024


def test_a_file_above_max_sample_bytes_fails_the_pack_under_strict(tmp_path, corgi):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "large.txt").write_text("word " * 400, encoding="utf-8")
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--workers", "1", "--max-sample-bytes", "1k", "--strict")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "large.txt" in line and "--max-sample-bytes" in line


def test_the_worker_reads_at_most_the_limit_even_from_a_file_that_grew(tmp_path, monkeypatch):
    path = tmp_path / "grown.bin"
    path.write_bytes(b"x" * (3 << 20))
    assert len(folder.read_regular_file(str(path), 3 << 20)) == 3 << 20
    with pytest.raises(BadInput, match="above the limit of 2,097,152"):
        folder.read_regular_file(str(path), 2 << 20)
    real_fstat = os.fstat

    def stale_fstat(fd):  # the size the walk saw: the file has grown since
        info = real_fstat(fd)
        return os.stat_result((*info[:6], 10, *info[7:]))

    monkeypatch.setattr(os, "fstat", stale_fstat)
    with pytest.raises(BadInput, match=r"^grew past the limit of 1,048,576 bytes while it was read"):
        folder.read_regular_file(str(path), 1 << 20)


@pytest.mark.parametrize("limits", [{"max_pixels": 0}, {"max_pixels": -5}, {"max_pixels": True}, {"max_pixels": 2.5},
                                    {"max_sample_bytes": 0}, {"max_sample_bytes": None}, {"max_sample_bytes": "1k"}])
def test_pack_options_refuse_limits_that_are_not_positive_ints(limits):
    with pytest.raises(PackError, match=next(iter(limits))):
        PackOptions(**limits)


def test_a_zero_max_sample_bytes_is_one_line(tmp_path, corgi):
    write_text(tmp_path / "src" / "a" / "t.txt", 3)
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--max-sample-bytes", "0")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == ["Error: max_sample_bytes must be a positive int, not 0"]


# --- --kind, as the help says ---------------------------------------------------------------------

def test_kind_keeps_only_files_of_that_kind_as_its_help_says(tmp_path, corgi):
    help_text = " ".join(corgi("pack", "--help").stdout.split())
    assert "Keep only samples with a field of this kind" in help_text and "Force" not in help_text
    write_image(tmp_path / "src" / "a" / "pic.png", 4, 4)
    (tmp_path / "src" / "a" / "raw.img").write_bytes((tmp_path / "src" / "a" / "pic.png").read_bytes())  # unknown ext
    write_text(tmp_path / "src" / "a" / "notes.txt", 3)
    write_text(tmp_path / "src" / "a" / "more.md", 3)
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--kind", "image", "--workers", "1")
    assert result.exit_code == 0
    m = open_manifest(tmp_path / "out")
    assert sorted(m.keys()) == ["a/pic", "a/raw"]
    assert sorted(entry["path"] for entry in list(m.skip_records())) == ["a/more.md", "a/notes.txt"]
    assert {entry["reason"] for entry in list(m.skip_records())} == {"a text file: --kind image keeps only image files"}
    warnings = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert warnings == ["corgi pack: warning: skipped 2 files of other kinds than image (--kind image)"], result.stderr


# --- pack memory: the spooled names are never mapped ------------------------------------------------

def test_spooled_names_are_read_back_without_mapping_the_spool(tmp_path):
    strings = SpooledStrings(tmp_path)
    names = [f"n{i % 1000:08d}/n{i % 1000:08d}_{i:06d}.txt" for i in range(50_000)]
    strings.extend(names)
    strings.seal()
    order = np.random.default_rng(0).permutation(len(names))
    assert [raw.decode() for raw in strings.take(order[:8192])] == [names[i] for i in order[:8192].tolist()]
    inode = os.fstat(strings._file.fileno()).st_ino
    with open("/proc/self/maps") as maps:
        mapped = [line for line in maps if line.split()[4:5] == [str(inode)]]
    strings.close()
    assert mapped == []  # a map of the spool once set the pack driver's peak RSS: 57 B per file

"""`corgi verify` reports every problem: counts and --max-errors, sidecars, true sizes, --jobs, JSON shape."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from corgi_io.errors import FormatError, StorageError
from corgi_io.formats.tfrecord import parse_index
from corgi_io.manifest import open_manifest
from corgi_io.storage import open_storage
from corgi_io.report.verify import verify
from helpers.packs import flip


@pytest.fixture(params=["wds", "tfrecord"])
def pack_copy(request, copy_pack):
    """(format, private copy of the small pack of that format)."""
    return request.param, copy_pack(request.param)


@pytest.fixture
def tfrecord_copy(copy_pack):
    return copy_pack("tfrecord")


def flip_payloads(out: Path, shards) -> list:
    """Flip a payload byte of the last sample of each shard in `shards`; returns those samples' (shard path, key)."""
    m = open_manifest(out)
    damaged = []
    for k in shards:
        i = m.shards[k].first_sample + m.shards[k].samples - 1
        flip(out / m.shards[k].path, int(m.samples.data_offset[i]))
        damaged.append((m.shards[k].path, m.key(i)))
    return damaged


def test_every_problem_is_counted_and_listed_in_shard_order(pack_copy, corgi):
    fmt, out = pack_copy
    damaged = flip_payloads(out, [4, 0, 2])
    report = json.loads(corgi("verify", out, "--json").stdout)
    assert report["total_problems"] == 3 and report["ok"] is False
    assert [(p["shard"], p["key"]) for p in report["problems"]] == sorted(damaged)
    assert all("mismatch" in p["message"] for p in report["problems"])

    result = corgi("verify", out, "--max-errors", "2")
    assert result.exit_code == 1
    *lines, summary = result.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("corgi verify: ") for line in lines)
    assert [shard in line and repr(key) in line for line, (shard, key) in zip(lines, sorted(damaged))] == [True, True]
    assert "3 problems" in summary and "1 not listed" in summary
    limited = json.loads(corgi("verify", out, "--json", "--max-errors", "2").stdout)
    assert limited["total_problems"] == 3 and limited["problems"] == report["problems"][:2]


def test_every_damaged_block_of_a_shard_is_reported(pack_copy):
    fmt, out = pack_copy
    m = open_manifest(out)
    b = m.blocks
    k = int(np.bincount(b.shard).argmax())
    blocks = np.flatnonzero(b.shard == k)
    assert len(blocks) >= 2
    for block in blocks:
        flip(out / m.shards[k].path, int(m.samples.data_offset[b.first[block]]))
    report = verify(out, progress=False)
    assert report.total_problems == len(blocks) == len(report.problems)
    assert report.samples_checked == m.num_samples
    assert [p.offset for p in report.problems] == [int(m.samples.offset[b.first[block]]) for block in blocks]


def test_missing_shard_is_one_problem_and_the_rest_is_checked(pack_copy):
    fmt, out = pack_copy
    m = open_manifest(out)
    k = int(np.bincount(m.blocks.shard).argmax())
    (out / m.shards[k].path).unlink()
    flip_payloads(out, [k + 1])
    report = verify(out, progress=False)
    assert report.total_problems == 2
    assert [p.shard for p in report.problems] == [m.shards[k].path, m.shards[k + 1].path]
    assert "missing" in report.problems[0].message
    assert report.samples_checked == m.num_samples - m.shards[k].samples


def test_truncation_reports_the_true_size(pack_copy):
    """Cut shards at many random points: one problem each, naming os.path.getsize; blocks before the cut still pass."""
    fmt, out = pack_copy
    m = open_manifest(out)
    rng = random.Random(7)
    for _ in range(12):
        shard = rng.choice(m.shards)
        path = out / shard.path
        original = path.read_bytes()
        os.truncate(path, rng.randrange(shard.bytes))
        size = os.path.getsize(path)
        report = verify(out, progress=False)
        path.write_bytes(original)
        assert report.total_problems == 1, report.problems
        problem = report.problems[0]
        assert (problem.shard, problem.offset) == (shard.path, size)
        assert f"shard is {size} bytes" in problem.message and "truncated" in problem.message
        b = m.blocks
        whole = (b.shard == m.shards.index(shard)) & (b.offset + b.length <= size)
        assert report.samples_checked == m.num_samples - shard.samples + int(b.count[whole].sum())


def test_short_read_names_the_true_file_size(tmp_path):
    """A read that starts past the end of a file names the file's real size, not the read's start."""
    (tmp_path / "f.bin").write_bytes(b"x" * 1000)
    storage = open_storage(str(tmp_path))
    for offset in (500, 1000, 1500):
        with pytest.raises(StorageError, match=f"at offset {offset}: file ends at 1000,"):
            storage.read_range("f.bin", offset, 800)


def line_start(data: bytes, line: int) -> int:
    return sum(len(text) + 1 for text in data.split(b"\n")[:line])


def missing(data):
    return None, 0


def garbage(data):
    return random.Random(0).randbytes(len(data)), 0


def text_line(data):
    second = line_start(data, 1)
    return data[:second] + b"hello world\n" + data[second:], second


def cut_mid_line(data):
    return data[:-3], line_start(data, data.count(b"\n") - 1)


def cut_at_line(data):
    cut = line_start(data, data.count(b"\n") - 1)
    return data[:cut], cut


def shifted_line(data):
    lines = data.split(b"\n")
    offset, length = lines[2].split()
    lines[2] = b"%d %s" % (int(offset) + 1, length)
    return b"\n".join(lines), line_start(data, 2)


def oversized(data):
    return data + b"0" * 40_000, 0


SIDECAR_DAMAGE = [(missing, "missing"), (garbage, "not an 'offset length' line"),
                  (text_line, "not an 'offset length' line"), (cut_mid_line, "no newline"),
                  (cut_at_line, "lists 5 records, the shard has 6"), (shifted_line, "line 3 says offset"),
                  (oversized, "more than an index of 6 records")]


@pytest.mark.parametrize("damage, words", SIDECAR_DAMAGE, ids=[d.__name__ for d, _ in SIDECAR_DAMAGE])
def test_damaged_index_sidecar_is_one_problem_naming_it(tfrecord_copy, damage, words):
    m = open_manifest(tfrecord_copy)
    assert m.shards[1].samples == 6
    index = tfrecord_copy / (m.shards[1].path + ".index")
    damaged, offset = damage(index.read_bytes())
    if damaged is None:
        index.unlink()
    else:
        index.write_bytes(damaged)
    report = verify(tfrecord_copy, progress=False)
    assert report.total_problems == 1, report.problems
    problem = report.problems[0]
    assert (problem.shard, problem.offset, problem.key) == (index.name, offset, None)
    assert problem.message.startswith("index sidecar") and words in problem.message, problem.message
    assert report.samples_checked == m.num_samples


def test_intact_sidecars_pass(tfrecord_copy):
    report = verify(tfrecord_copy, progress=False)
    assert report.ok and report.problems == [] and report.total_problems == 0


@pytest.mark.parametrize("text", [b"1 2\n3\n", b"1  2\n", b"-1 2\n", b"1 2", b"1 2\r\n", b" 1 2\n", b"1\t2\n",
                                  b"1234567890123456789 2\n", "\u0661 2\n".encode(), b"1 2\n\n", b"\n"])
def test_parse_index_refuses_anything_but_offset_length_lines(text):
    with pytest.raises(FormatError):
        parse_index(text)


def test_parse_index_reads_lines():
    assert parse_index(b"").shape == (0, 2)
    assert parse_index(b"0 12\n12 999999999999999999\n").tolist() == [[0, 12], [12, 999999999999999999]]
    with pytest.raises(FormatError) as caught:
        parse_index(b"0 12\n12 5\nxx 3\n")
    assert caught.value.offset == 10


def test_a_shard_replaced_by_a_folder_is_reported_not_raised(pack_copy):
    fmt, out = pack_copy
    m = open_manifest(out)
    path = out / m.shards[0].path
    path.unlink()
    path.mkdir()
    report = verify(out, progress=False)
    assert not report.ok and {p.shard for p in report.problems} == {m.shards[0].path}


@pytest.mark.slow
def test_jobs_give_the_same_report(pack_copy):
    fmt, out = pack_copy
    m = open_manifest(out)
    flip_payloads(out, [1, 3])
    (out / m.shards[-1].path).unlink()
    os.truncate(out / m.shards[2].path, m.shards[2].bytes // 2)
    one = verify(out, progress=False, max_errors=3)
    assert one.total_problems == 4 and len(one.problems) == 3
    assert verify(out, progress=False, max_errors=3, jobs=2) == one
    assert verify(out, progress=False, jobs=3) == verify(out, progress=False)


@pytest.mark.slow
def test_json_shape(pack_copy, corgi):
    fmt, out = pack_copy
    flip_payloads(out, [0])
    result = corgi("verify", out, "--json", "--jobs", "2")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert set(report) == {"ok", "samples_checked", "total_problems", "problems"}
    assert report["ok"] is False and report["total_problems"] == 1
    assert report["samples_checked"] == open_manifest(out).num_samples
    (problem,) = report["problems"]
    assert set(problem) == {"shard", "offset", "message", "key"}
    assert isinstance(problem["offset"], int) and isinstance(problem["key"], str)

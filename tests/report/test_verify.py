"""`corgi verify`: exit 0 on an intact pack; name the shard and byte offset of damage otherwise.

Each test here damages one place; tests/report/test_verify_report.py covers many problems, sidecars and --jobs.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import crc32c
import numpy as np
import pytest

from corgi_io.manifest import open_manifest
from helpers.packs import flip, resync_row_groups

FORMATS = ["wds", "tfrecord"]


@pytest.fixture(params=FORMATS)
def pack_copy(request, copy_pack):
    """(format, private copy of the small pack of that format)."""
    return request.param, copy_pack(request.param)




def sample_in_block(m, which: str) -> int:
    """A sample that is the first ('first') or not the first ('inner') of a block of several samples."""
    block = next(i for i in range(len(m.blocks)) if m.blocks.count[i] >= 2 and m.blocks.shard[i] > 0)
    return int(m.blocks.first[block]) + (0 if which == "first" else 1)


def fail_report(corgi, out: Path):
    """Run verify twice (text, --json); both must fail and agree; returns (first stderr line, first problem dict)."""
    result = corgi("verify", out)
    assert result.exit_code != 0
    *lines, summary = result.stderr.strip().splitlines()
    as_json = corgi("verify", out, "--json")
    assert as_json.exit_code != 0
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and 1 <= len(lines) == len(report["problems"]) <= report["total_problems"]
    assert summary.startswith(f"corgi verify: {report['total_problems']:,} problem"), summary
    for line, problem in zip(lines, report["problems"]):
        assert problem["shard"] in line and f"byte offset {problem['offset']}" in line
    return lines[0], report["problems"][0]


def assert_names_damage(m, problem, shard: str, position: int) -> None:
    """The report names `shard` and an offset at the damaged record's start or the damaged byte."""
    assert problem["shard"] == shard
    s = m.samples
    k = next(k for k, sh in enumerate(m.shards) if sh.path == shard)
    rows = np.flatnonzero((s.shard == k) & (s.offset <= position) & (position < s.offset + s.length))
    assert len(rows) == 1
    assert int(s.offset[rows[0]]) <= problem["offset"] <= position


def test_intact_pack_verifies(pack_copy, corgi):
    fmt, out = pack_copy
    n = open_manifest(out).num_samples
    result = corgi("verify", out)
    assert result.exit_code == 0, result.output
    assert f"{n:,} samples" in result.stdout
    report = json.loads(corgi("verify", out, "--json").stdout)
    assert report == {"ok": True, "samples_checked": n, "total_problems": 0, "problems": []}


@pytest.mark.slow
def test_console_script_exit_codes(pack_copy):
    fmt, out = pack_copy
    assert subprocess.run(["corgi", "verify", str(out)], capture_output=True).returncode == 0
    m = open_manifest(out)
    flip(out / m.shards[-1].path, int(m.samples.data_offset[-1]))
    proc = subprocess.run(["corgi", "verify", str(out)], capture_output=True, text=True)
    assert proc.returncode != 0 and m.shards[-1].path in proc.stderr


def payload_middle(samples, i: int) -> int:
    return int(samples.data_offset[i] + samples.bytes[i] // 2)


def framing_byte(samples, i: int) -> int:
    """A byte of the tar header (member name) or of the TFRecord length field."""
    return int(samples.offset[i]) + 3


@pytest.mark.parametrize("where", [payload_middle, framing_byte])
@pytest.mark.parametrize("which", ["first", "inner"])
def test_flipped_byte_is_named_with_shard_and_offset(pack_copy, corgi, which, where):
    fmt, out = pack_copy
    m = open_manifest(out)
    i = sample_in_block(m, which)
    shard = m.shards[int(m.samples.shard[i])].path
    position = where(m.samples, i)
    flip(out / shard, position)
    _, problem = fail_report(corgi, out)
    assert_names_damage(m, problem, shard, position)


def rewrite_crc(out: Path, i: int) -> None:
    """Make the manifest's checksums agree with the (damaged) shard, so only framing checks remain.

    The checksums run through each block, so sample i's and those after it in its block are recomputed.
    """
    m = open_manifest(out)
    s = m.samples
    block = int(np.searchsorted(m.blocks.first, i, side="right")) - 1
    stop = int(m.blocks.first[block] + m.blocks.count[block])
    column = out / "columns" / "sample_checksum.npy"
    checksums = np.load(column, allow_pickle=False)
    running = int(checksums[i - 1]) if i > m.blocks.first[block] else 0
    with open(out / m.shards[int(s.shard[i])].path, "rb") as f:
        for j in range(i, stop):
            f.seek(int(s.offset[j]))
            running = checksums[j] = crc32c.crc32c(f.read(int(s.length[j])), running)
    np.save(column, checksums)
    resync_row_groups(out)


@pytest.mark.parametrize("which", ["inner", "first"])
def test_wds_framing_checked_even_when_crc_agrees(copy_pack, corgi, which):
    out = copy_pack("wds")
    m = open_manifest(out)
    i = sample_in_block(m, which)
    shard = m.shards[int(m.samples.shard[i])].path
    position = int(m.samples.offset[i]) + 148  # the header checksum field
    flip(out / shard, position, 0x01)
    rewrite_crc(out, i)
    _, problem = fail_report(corgi, out)
    assert_names_damage(m, problem, shard, position)


@pytest.mark.parametrize("which", ["first", "inner"])
@pytest.mark.parametrize("where", ["length", "payload"])
def test_tfrecord_crc32c_checked_even_when_crc_agrees(copy_pack, corgi, which, where):
    out = copy_pack("tfrecord")
    m = open_manifest(out)
    i = sample_in_block(m, which)
    shard = m.shards[int(m.samples.shard[i])].path
    position = int(m.samples.offset[i]) + 2 if where == "length" else int(m.samples.data_offset[i]) + 1
    flip(out / shard, position)
    rewrite_crc(out, i)
    _, problem = fail_report(corgi, out)
    assert problem["shard"] == shard and problem["offset"] == int(m.samples.offset[i])


def test_wds_damaged_end_of_archive(copy_pack, corgi):
    out = copy_pack("wds")
    m = open_manifest(out)
    shard = m.shards[2]
    flip(out / shard.path, shard.bytes - 700)
    line, problem = fail_report(corgi, out)
    assert problem["shard"] == shard.path
    assert shard.bytes - 1024 <= problem["offset"] <= shard.bytes - 700


@pytest.mark.parametrize("cut", [1, 600, "half"])
def test_truncated_shard(pack_copy, corgi, cut):
    fmt, out = pack_copy
    m = open_manifest(out)
    shard = m.shards[1]
    new_size = shard.bytes // 2 if cut == "half" else shard.bytes - cut
    with open(out / shard.path, "r+b") as f:
        f.truncate(new_size)
    line, problem = fail_report(corgi, out)
    assert problem["shard"] == shard.path
    assert problem["offset"] <= new_size
    assert "truncated" in line


def test_extra_bytes_after_shard(pack_copy, corgi):
    fmt, out = pack_copy
    m = open_manifest(out)
    with open(out / m.shards[0].path, "ab") as f:
        f.write(b"\0" * 10)
    line, problem = fail_report(corgi, out)
    assert problem["shard"] == m.shards[0].path and problem["offset"] == m.shards[0].bytes


def test_missing_shard(pack_copy, corgi):
    fmt, out = pack_copy
    m = open_manifest(out)
    (out / m.shards[-1].path).unlink()
    line, problem = fail_report(corgi, out)
    assert problem["shard"] == m.shards[-1].path and "missing" in line


def test_reordered_records(pack_copy, corgi):
    """The first two records of a shard exchanged: every record is intact, but not where the manifest says."""
    fmt, out = pack_copy
    m = open_manifest(out)
    path = out / m.shards[0].path
    s = m.samples
    assert m.shards[0].samples >= 2 and s.length[0] != s.length[1]
    data = path.read_bytes()
    r1, r2 = data[: s.length[0]], data[s.length[0]: s.length[0] + s.length[1]]
    path.write_bytes(r2 + r1 + data[len(r1) + len(r2):])
    line, problem = fail_report(corgi, out)
    assert problem["shard"] == m.shards[0].path and problem["offset"] == 0


def test_verify_of_a_non_pack_is_a_one_line_error(tmp_path, corgi):
    result = corgi("verify", tmp_path)
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "manifest.json" in lines[0]
    assert re.search(re.escape(str(tmp_path)), lines[0])


@pytest.mark.parametrize("damage", ["garbled", "other rows"])
def test_a_row_group_that_disagrees_with_the_columns_fails_verify_naming_rows_bin(pack_copy, corgi, damage):
    """Remote readers read columns/rows.bin, local ones the .npy columns: verify checks they agree."""
    import zlib

    from corgi_io.manifest.row_groups import TABLE_COLUMNS

    _, out = pack_copy
    rows_bin = out / "columns" / "rows.bin"
    table = np.frombuffer((out / "columns" / "blocks.bin").read_bytes(), "<i8").reshape(-1, len(TABLE_COLUMNS))
    raw = bytearray(rows_bin.read_bytes())
    start, stop = int(table[1, TABLE_COLUMNS.index("rows")]), int(table[2, TABLE_COLUMNS.index("rows")])
    if damage == "garbled":
        raw[start + 3] ^= 0x5A
    else:  # the same length inflated, one label changed: re-deflated, so rows.bin's offsets shift by the difference
        group = bytearray(zlib.decompress(bytes(raw[start:stop])))
        group[0] ^= 0x01  # the first sample's label (the first column)
        raw[start:stop] = zlib.compress(bytes(group), 1)
        if stop - start != len(raw) - len(rows_bin.read_bytes()) + (stop - start):
            pytest.skip("the re-deflated group changed length: offsets would shift")
    rows_bin.write_bytes(bytes(raw))
    result = corgi("verify", out)
    assert result.exit_code != 0
    assert f"{out}/columns/rows.bin: block 1's row group" in result.stderr and "\n" not in result.stderr.strip()

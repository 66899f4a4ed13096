"""`corgi verify` checks each field on its own (manifest version 6): a changed field is named with its shard,
offset and key; a field row that disagrees with the shard's framing, or a field checksum with its bytes, is found."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from corgi_io.manifest import open_manifest
from corgi_io.packing import PackOptions, pack
from corgi_io.report.verify import verify
from helpers.corpus_factory import write_image, write_text
from helpers.packs import flip, resync_row_groups


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """fmt -> a pack of jpg + txt + json samples, labeled, in blocks of 2."""
    source = tmp_path_factory.mktemp("verify-fields-src")
    for i in range(6):
        stem = source / f"c{i % 2}" / f"s{i}"
        write_image(f"{stem}.jpg", 12 + i, 9, seed=i)
        write_text(f"{stem}.txt", 4 + i, seed=i)
        (stem.parent / f"s{i}.json").write_text('{"n": %d}' % i)
    made = {}
    for fmt in ("wds", "tfrecord"):
        made[fmt] = tmp_path_factory.mktemp(f"verify-fields-{fmt}") / "pack"
        pack(source, made[fmt], PackOptions(format=fmt, block_samples=2, order="keep"), progress=False)
    return made


@pytest.fixture
def copy(packs, tmp_path):
    def make(fmt):
        shutil.copytree(packs[fmt], tmp_path / "pack")
        return tmp_path / "pack"
    return make


def edit_column(out, name: str, change) -> None:
    """`change(array)` column `name` of the pack at `out` in place, its row groups rewritten to agree."""
    array = np.load(out / "columns" / f"{name}.npy")
    change(array)
    np.save(out / "columns" / f"{name}.npy", array)
    resync_row_groups(out)


def a_field(m, name: str, sample: int = 3) -> tuple:
    """(offset, length) of field `name` of sample `sample`."""
    r = m.field_ranges(sample, sample + 1, [name])
    return int(r.offset[0]), int(r.length[0])


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_a_flipped_byte_in_a_caption_names_the_shard_offset_key_and_field(copy, corgi, fmt):
    out = copy(fmt)
    m = open_manifest(out)
    offset, length = a_field(m, "txt")
    shard = m.shards.path(int(m.samples.shard[3]))
    flip(out / shard, offset + length // 2)
    report = verify(out, progress=False)
    assert report.total_problems == 1
    problem = report.problems[0]
    assert (problem.shard, problem.offset, problem.key) == (shard, int(m.samples.offset[3]), m.key(3))
    assert problem.message == (f"sample {m.key(3)!r}: field 'txt' (its {length} bytes at byte offset {offset}): "
                               "crc32c mismatch (field bytes changed)")
    result = corgi("verify", out)
    assert result.exit_code == 1
    assert f"{shard}: byte offset {int(m.samples.offset[3])}: sample {m.key(3)!r}: field 'txt' " in result.stderr


def test_a_changed_tar_header_blames_the_record_not_a_field(copy):
    """Framing bytes have no checksum of their own: the record's names the sample, no field is blamed."""
    out = copy("wds")
    m = open_manifest(out)
    header = int(m.field_ranges(3, 4, ["txt"]).header[0])
    flip(out / m.shards.path(int(m.samples.shard[3])), header + 136)  # the member's mtime field
    problems = verify(out, progress=False).problems
    assert [p.message for p in problems] == [f"sample {m.key(3)!r}: crc32c mismatch (record bytes changed)"]


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_a_field_checksum_that_disagrees_with_intact_bytes_is_found(copy, fmt):
    out = copy(fmt)
    m = open_manifest(out)
    row = int(m.field_start[4])
    edit_column(out, "field_crc", lambda crcs: crcs.__setitem__(row, crcs[row] ^ 1))
    report = verify(out, progress=False)
    assert report.total_problems == 1 and report.problems[0].key == m.key(4)
    assert f"field {m.fields[int(m.field_rows.id[row])]!r}" in report.problems[0].message


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_field_rows_that_swap_two_fields_disagree_with_the_shards_framing(copy, fmt):
    """Two non-primary fields' ids exchanged: every checksum and the mask still agree, the names do not."""
    out = copy(fmt)
    m = open_manifest(out)
    first = int(m.field_start[2])
    names = [m.fields[i] for i in m.field_rows.id[first:first + 3]]
    rows = [first + names.index("txt"), first + names.index("json")]
    edit_column(out, "field_id", lambda ids: ids.__setitem__(rows, ids[rows[::-1]]))
    report = verify(out, progress=False)
    assert report.total_problems == 1 and report.problems[0].key == m.key(2)
    assert "shard has fields (name, header, offset, length)" in report.problems[0].message

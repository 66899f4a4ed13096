"""The manifest: fields, consistent per-sample columns, and one-line validation errors naming the file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from corgi_io.manifest import KINDS, MANIFEST_VERSION, ManifestError, open_manifest

FORMATS = ["wds", "tfrecord"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_head_fields(packed_mixed, mixed_corpus, fmt):
    root, expected = mixed_corpus
    out = packed_mixed(fmt)
    head = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert head["corgi_manifest_version"] == MANIFEST_VERSION
    assert head["format"] == fmt
    assert head["labels"] == ["bird", "cat", "dog"]
    assert head["skipped"] == {"count": 0, "bytes": 0, "reasons": {}}
    assert head["options"]["format"] == fmt and head["options"]["block_samples"] == 3
    assert head["options"]["shard_bytes"] == 40 << 10 and head["options"]["block_bytes"] == 24 << 10
    assert head["options"]["order"] == "shuffle" and head["options"]["seed"] == 0
    assert isinstance(head["created"], str)
    exts = {rel.rsplit(".", 1)[-1].lower() for rel in expected}
    assert head["checksum"] == "crc32c" and head["extensions"] == sorted(exts)
    m = open_manifest(out)
    assert head["counts"] == {"samples": len(expected), "blocks": len(m.blocks),
                              "key_bytes": sum(len(k.encode()) for k in m.keys()),
                              "rows_bytes": (out / "columns" / "rows.bin").stat().st_size,
                              "fields": int(m.field_start[-1])}
    shards = head["shards"]
    assert [s["path"] for s in shards] == sorted(p.name for p in out.glob("shard-*") if not p.name.endswith(".index"))
    for s in shards:
        assert s["bytes"] == (out / s["path"]).stat().st_size
    assert sum(s["samples"] for s in shards) == len(expected)
    for column in (out / "columns").glob("*.npy"):  # plain flat arrays, no pickle
        assert np.load(column, allow_pickle=False, mmap_mode="r").ndim == 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_columns_are_consistent(packed_mixed, mixed_corpus, fmt):
    root, expected = mixed_corpus
    m = open_manifest(packed_mixed(fmt))
    s, b, n = m.samples, m.blocks, m.num_samples
    assert n == len(expected) == len(m.keys())
    for name in ("label", "kind", "bytes", "size", "shard", "offset", "length", "data_offset", "checksum", "ext"):
        assert len(getattr(s, name)) == n, name
    assert sorted(m.kind_name(i) for i in range(n)) == sorted(e.kind for e in expected.values())
    assert sorted(m.labels[i] for i in s.label) == sorted(e.label_name for e in expected.values())
    assert sorted(m.extensions[i] for i in s.ext) == sorted(rel.rsplit(".", 1)[-1].lower() for rel in expected)
    assert sorted(s.bytes.tolist()) == sorted(e.nbytes for e in expected.values())
    assert sorted(s.size.tolist()) == sorted(e.size for e in expected.values())
    assert set(s.kind.tolist()) <= set(range(len(KINDS)))
    # shards: sample ranges in order; inside a shard records are contiguous from byte 0
    for k, shard in enumerate(m.shards):
        rows = np.arange(shard.first_sample, shard.first_sample + shard.samples)
        assert (s.shard[rows] == k).all()
        assert s.offset[rows[0]] == 0
        assert np.array_equal(s.offset[rows[1:]], (s.offset + s.length)[rows[:-1]])
        assert (s.data_offset[rows] >= s.offset[rows]).all()
        assert (s.data_offset[rows] + s.bytes[rows] <= s.offset[rows] + s.length[rows]).all()
        assert s.offset[rows[-1]] + s.length[rows[-1]] <= shard.bytes
    # blocks tile the samples, never cross a shard, and sum the sizes
    assert b.first[0] == 0 and int(b.count.sum()) == n
    assert np.array_equal(b.first[1:], (b.first + b.count)[:-1])
    for i in range(len(b)):
        rows = slice(int(b.first[i]), int(b.first[i] + b.count[i]))
        assert set(s.shard[rows].tolist()) == {int(b.shard[i])}
        assert b.offset[i] == s.offset[rows][0]
        assert b.length[i] == int(s.length[rows].sum())
        assert b.size_sum[i] == int(s.size[rows].sum())
    assert int(b.count.max()) <= 3


@pytest.mark.parametrize("fmt", FORMATS)
def test_checksum_column_is_the_running_crc32c_of_each_block(packed_mixed, fmt):
    """A sample's checksum is CRC32C of its block's bytes from the block's start through its own record."""
    import crc32c

    out = packed_mixed(fmt)
    m = open_manifest(out)
    s, b = m.samples, m.blocks
    for block in range(len(b)):
        shard = (out / m.shards[int(b.shard[block])].path).read_bytes()
        for i in range(int(b.first[block]), int(b.first[block] + b.count[block])):
            prefix = shard[int(b.offset[block]):int(s.offset[i] + s.length[i])]
            assert crc32c.crc32c(prefix) == int(s.checksum[i]), (block, i)


def test_open_manifest_accepts_string_and_manifest(packed_mixed):
    out = packed_mixed("wds")
    m = open_manifest(str(out))
    assert open_manifest(m) is m
    assert m.format == "wds" and m.num_samples > 0


# --- validation: one-line errors naming the file ----------------------------------------------

@pytest.fixture
def pack_copy(copy_pack):
    """A private, editable copy of the small wds pack."""
    return copy_pack("wds")


def edit_head(out: Path, change) -> None:
    path = out / "manifest.json"
    head = json.loads(path.read_text(encoding="utf-8"))
    change(head)
    path.write_text(json.dumps(head), encoding="utf-8")


def edit_columns(out: Path, change) -> None:
    """Rewrite the columns/*.npy files after `change(arrays)`; the head's counts follow the new lengths."""
    arrays = {path.stem: np.load(path, allow_pickle=False) for path in (out / "columns").glob("*.npy")}
    change(arrays)
    for path in (out / "columns").glob("*.npy"):
        path.unlink()
    for name, array in arrays.items():
        np.save(out / "columns" / f"{name}.npy", array)
    counts = {"samples": len(arrays.get("key_offsets", [0])) - 1, "blocks": len(arrays.get("block_first", [])),
              "key_bytes": len(arrays.get("key_blob", [])), "fields": len(arrays.get("field_id", []))}
    edit_head(out, lambda head: head.update(counts={**counts, "rows_bytes": head["counts"]["rows_bytes"]}))


def manifest_error(out: Path, file_name: str, when: str = "open") -> str:
    """The one-line ManifestError naming `file_name` that `open_manifest` raises (`when="open"`), or that
    the full row validation raises after an open that succeeds (`when="rows"`: a per-sample fault)."""
    check = (lambda: open_manifest(out)) if when == "open" else open_manifest(out).validate_rows
    with pytest.raises(ManifestError) as info:
        check()
    message = str(info.value)
    assert "\n" not in message, message
    assert f"{out}/{file_name}" in message, message
    return message


def test_missing_manifest(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "no manifest" in manifest_error(tmp_path / "empty", "manifest.json")


def test_missing_directory(tmp_path):
    manifest_error(tmp_path / "nowhere", "manifest.json")


def test_intact_copy_opens(pack_copy):
    assert open_manifest(pack_copy).num_samples > 0


@pytest.mark.parametrize("version", [MANIFEST_VERSION + 1, 0, "1", None])
def test_wrong_version(pack_copy, version):
    edit_head(pack_copy, lambda head: head.update(corgi_manifest_version=version))
    message = manifest_error(pack_copy, "manifest.json")
    assert "version" in message and repr(version) in message


def test_no_version(pack_copy):
    edit_head(pack_copy, lambda head: head.pop("corgi_manifest_version"))
    assert "version" in manifest_error(pack_copy, "manifest.json")


@pytest.mark.parametrize("field", ["format", "options", "labels", "shards", "skipped", "checksum", "extensions", "counts"])
def test_missing_field(pack_copy, field):
    edit_head(pack_copy, lambda head: head.pop(field))
    message = manifest_error(pack_copy, "manifest.json")
    assert "missing" in message and repr(field) in message


def test_unknown_format(pack_copy):
    edit_head(pack_copy, lambda head: head.update(format="parquet"))
    assert "parquet" in manifest_error(pack_copy, "manifest.json")


def test_head_not_json(pack_copy):
    (pack_copy / "manifest.json").write_bytes(b'{"format": "wds", ')
    assert "JSON" in manifest_error(pack_copy, "manifest.json")


@pytest.mark.parametrize("column,dtype", [("sample_offset", np.float64), ("sample_size", np.int32),
                                          ("sample_label", np.int64), ("block_length", np.uint64)])
def test_column_with_wrong_dtype(pack_copy, column, dtype):
    edit_columns(pack_copy, lambda a: a.update({column: a[column].astype(dtype)}))
    message = manifest_error(pack_copy, f"columns/{column}.npy")
    assert np.dtype(dtype).name in message


def test_column_with_wrong_shape(pack_copy):
    edit_columns(pack_copy, lambda a: a.update(sample_size=a["sample_size"].reshape(-1, 1)))
    assert "1-D" in manifest_error(pack_copy, "columns/sample_size.npy")


@pytest.mark.parametrize("column", ["sample_checksum", "block_first", "key_blob"])
def test_missing_column(pack_copy, column):
    (pack_copy / "columns" / f"{column}.npy").unlink()
    assert "cannot read" in manifest_error(pack_copy, f"columns/{column}.npy")


def test_column_rows_disagree_with_head_counts(pack_copy):
    edit_head(pack_copy, lambda head: head["counts"].update(blocks=head["counts"]["blocks"] + 1))
    assert "head declares" in manifest_error(pack_copy, "columns/block_shard.npy")


def test_column_file_truncated(pack_copy):
    path = pack_copy / "columns" / "sample_offset.npy"
    path.write_bytes(path.read_bytes()[:-8])
    assert "bytes" in manifest_error(pack_copy, "columns/sample_offset.npy")


def test_column_file_not_npy(pack_copy):
    (pack_copy / "columns" / "sample_size.npy").write_bytes(b"garbage" * 10)
    assert "not a valid .npy" in manifest_error(pack_copy, "columns/sample_size.npy")


def test_offset_past_shard_size_in_columns(pack_copy):
    m = open_manifest(pack_copy)
    last = m.shards[0].samples - 1  # the last sample of shard 0

    def push(a):
        a["sample_offset"] = a["sample_offset"].copy()
        a["sample_offset"][last] += m.shards[0].bytes
    edit_columns(pack_copy, push)
    message = manifest_error(pack_copy, "columns", when="rows")
    assert m.shards[0].path in message and str(m.shards[0].bytes) in message


def test_shard_bytes_smaller_than_its_records_in_head(pack_copy):
    m = open_manifest(pack_copy)
    edit_head(pack_copy, lambda head: head["shards"][1].update(bytes=1000))
    message = manifest_error(pack_copy, "columns")
    assert m.shards[1].path in message and "1000" in message


def test_shard_sample_ranges_must_tile(pack_copy):
    edit_head(pack_copy, lambda head: head["shards"][0].update(samples=head["shards"][0]["samples"] + 1))
    assert "shard" in manifest_error(pack_copy, "columns")


def test_malformed_shard_entry(pack_copy):
    edit_head(pack_copy, lambda head: head["shards"][0].pop("bytes"))
    assert "shard 0 bytes" in manifest_error(pack_copy, "manifest.json")


@pytest.mark.parametrize("path", ["../SECRET.bin", "/etc/passwd", "a/../../b.tar", "http://x/y.tar", "a//b.tar",
                                  "./a.tar", "a\nb.tar", ""])
def test_shard_path_must_stay_inside_the_pack(pack_copy, path):
    edit_head(pack_copy, lambda head: head["shards"][0].update(path=path.replace("\\n", "\n")))
    assert "inside the pack" in manifest_error(pack_copy, "manifest.json")


def test_label_outside_index(pack_copy):
    edit_head(pack_copy, lambda head: head.update(labels=["bird"]))
    assert "label" in manifest_error(pack_copy, "columns", when="rows")


def test_negative_size_refused(pack_copy):
    def negate(a):
        a["sample_size"] = -a["sample_size"]
    edit_columns(pack_copy, negate)
    assert "sample size outside" in manifest_error(pack_copy, "columns", when="rows")


def test_block_size_sum_disagrees(pack_copy):
    def bump(a):
        a["block_size_sum"] = a["block_size_sum"] + 1
    edit_columns(pack_copy, bump)
    assert "size" in manifest_error(pack_copy, "columns", when="rows")


def test_block_range_disagrees(pack_copy):
    def shrink(a):
        a["block_length"] = a["block_length"] - 1
    edit_columns(pack_copy, shrink)
    assert "block" in manifest_error(pack_copy, "columns", when="rows")


def test_keys_offsets_out_of_blob(pack_copy):
    def cut(a):
        a["key_blob"] = a["key_blob"][:-3]
    edit_columns(pack_copy, cut)
    assert "key" in manifest_error(pack_copy, "columns", when="rows")


@pytest.mark.parametrize("fmt", FORMATS)
def test_version_1_packs_still_open_and_verify(fmt):
    """Packs written by corgi-io 0.1 (one manifest.npz, zlib CRC32; tests/data, made by that version) still open."""
    from corgi_io import verify

    root = Path(__file__).parents[1] / "data" / f"v1-{fmt}"
    m = open_manifest(root)
    assert (m.version, m.checksum, m.num_samples, m.format) == (1, "crc32", 9, fmt)
    assert sorted(m.labels) == ["cat", "dog"] and set(m.extensions[i] for i in m.samples.ext) == {""}
    report = verify(root, progress=False)
    assert report.ok and report.samples_checked == 9


def test_cli_reports_manifest_errors_in_one_line(pack_copy, corgi):
    edit_head(pack_copy, lambda head: head.update(corgi_manifest_version=99))
    for command in ("stats", "verify"):
        result = corgi(command, pack_copy)
        assert result.exit_code != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "manifest.json" in lines[0] and "99" in lines[0], result.stderr

"""Shard formats: one block's byte range, read alone, parses to exactly that block's samples."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from corgi_io.formats import FormatError, get_format
from corgi_io.manifest import open_manifest

FORMATS = ["wds", "tfrecord"]


def read_range(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    assert len(data) == length
    return data


def block_bytes(out: Path, m, block: int) -> tuple:
    b = m.blocks
    offset, length = int(b.offset[block]), int(b.length[block])
    return read_range(out / m.shards[int(b.shard[block])].path, offset, length), offset


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_block_alone_parses_to_exactly_its_samples(packed_mixed, mixed_corpus, fmt):
    root, expected = mixed_corpus
    out = packed_mixed(fmt)
    m = open_manifest(out)
    b, s = m.blocks, m.samples
    assert len(m.shards) >= 3
    assert max(int((b.shard == i).sum()) for i in range(len(m.shards))) >= 2, "want shards of several blocks"
    stems = {rel.rsplit(".", 1)[0]: rel for rel in expected}
    keys = m.keys()
    seen = []
    for block in range(len(b)):
        data, offset = block_bytes(out, m, block)
        records = list(get_format(fmt).parse_block(data, offset))
        first, count = int(b.first[block]), int(b.count[block])
        assert [r.key for r in records] == keys[first:first + count]
        assert [r.label for r in records] == s.label[first:first + count].tolist()
        assert [r.offset for r in records] == s.offset[first:first + count].tolist()
        assert [r.length for r in records] == s.length[first:first + count].tolist()
        assert [r.data_offset for r in records] == s.data_offset[first:first + count].tolist()
        shard_path = out / m.shards[int(b.shard[block])].path
        for i, r in zip(range(first, first + count), records):
            assert r.data == read_range(shard_path, r.data_offset, int(s.bytes[i]))
            head, _, last = r.key.rpartition("/")
            rel = stems[f"{head}/{last.replace('%2E', '.').replace('%25', '%')}"]
            assert r.data == (root / rel).read_bytes()
            assert m.labels[r.label] == expected[rel].label_name
        seen += [r.key for r in records]
    assert seen == keys


@pytest.mark.parametrize("fmt", FORMATS)
def test_block_bytes_equal_the_concatenated_records(packed_mixed, fmt):
    out = packed_mixed(fmt)
    m = open_manifest(out)
    for block in range(len(m.blocks)):
        data, offset = block_bytes(out, m, block)
        first, count = int(m.blocks.first[block]), int(m.blocks.count[block])
        parts = [read_range(out / m.shards[int(m.samples.shard[i])].path, int(m.samples.offset[i]), int(m.samples.length[i]))
                 for i in range(first, first + count)]
        assert b"".join(parts) == data


@pytest.mark.parametrize("fmt", FORMATS)
def test_whole_shard_parses_to_its_samples(packed_mixed, fmt):
    out = packed_mixed(fmt)
    m = open_manifest(out)
    keys = m.keys()
    for shard in m.shards:
        data = (out / shard.path).read_bytes()
        records = list(get_format(fmt).parse_block(data, 0))
        assert [r.key for r in records] == keys[shard.first_sample: shard.first_sample + shard.samples]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cut_block_raises_format_error_with_offset(packed_mixed, fmt):
    out = packed_mixed(fmt)
    m = open_manifest(out)
    block = next(i for i in range(len(m.blocks)) if m.blocks.count[i] >= 2)
    data, offset = block_bytes(out, m, block)
    second = int(m.samples.offset[int(m.blocks.first[block]) + 1])
    cut = data[: second - offset + 100]  # the second record is cut short
    with pytest.raises(FormatError) as info:
        list(get_format(fmt).parse_block(cut, offset))
    assert second <= info.value.offset <= offset + len(cut)
    assert f"byte offset {info.value.offset}" in str(info.value)


DAMAGE_IN_A_LATER_RECORD = {  # (format, where in the record: absolute offset from the manifest's columns)
    "tfrecord-length-field": ("tfrecord", lambda samples, i: int(samples.offset[i]) + 3),
    "tfrecord-payload": ("tfrecord", lambda samples, i: int(samples.data_offset[i]) + 5),
    "wds-member-name": ("wds", lambda samples, i: int(samples.offset[i]) + 3),  # the tar header checksum fails
}


@pytest.mark.parametrize("case", DAMAGE_IN_A_LATER_RECORD)
def test_damage_in_a_later_record_names_that_records_offset(packed_mixed, case):
    fmt, where = DAMAGE_IN_A_LATER_RECORD[case]
    out = packed_mixed(fmt)
    m = open_manifest(out)
    block = next(i for i in range(len(m.blocks)) if m.blocks.count[i] >= 2)
    data, offset = block_bytes(out, m, block)
    i = int(m.blocks.first[block]) + 1
    damaged = bytearray(data)
    damaged[where(m.samples, i) - offset] ^= 0x40
    with pytest.raises(FormatError) as info:
        list(get_format(fmt).parse_block(bytes(damaged), offset))
    assert info.value.offset == int(m.samples.offset[i])


def test_wds_damaged_first_header_raises_format_error(packed_mixed):
    out = packed_mixed("wds")
    m = open_manifest(out)
    data, offset = block_bytes(out, m, 1)
    damaged = bytearray(data)
    damaged[3] ^= 0x40
    try:
        list(get_format("wds").parse_block(bytes(damaged), offset))
    except FormatError as exc:
        assert exc.offset == offset
    except tarfile.TarError as exc:
        pytest.fail(f"tarfile error escaped parse_block: {exc!r}")
    else:
        pytest.fail("a damaged tar header parsed")


def test_get_format_rejects_unknown_names():
    with pytest.raises(ValueError, match="parquet"):
        get_format("parquet")


ENCODE_ONE = ("import sys; sys.modules['torch'] = None\n"  # keeps the stock tfrecord package from importing torch
              "from corgi_io.formats import get_format\n"
              "parts, _ = get_format('tfrecord').encode('k/x', 'txt', b'payload', 1, 2)\n"
              "print(b''.join(parts).hex())\n")


@pytest.mark.slow
def test_tfrecord_records_are_identical_across_processes():
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", ENCODE_ONE], stdout=subprocess.PIPE, text=True) for _ in range(12)]
    outputs = {proc.communicate()[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert len(outputs) == 1, f"{len(outputs)} different encodings of the same record in 12 processes"


def test_tfrecord_framing_crcs_equal_the_tfrecord_package():
    """Our reader and writer share masked_crc, so only a reference implementation can catch a wrong CRC."""
    from tfrecord.writer import TFRecordWriter

    parts, _ = get_format("tfrecord").encode("cat/x", "jpg", b"payload" * 999, -1, 12345)
    blob = b"".join(parts)
    assert blob[8:12] == TFRecordWriter.masked_crc(blob[:8])
    assert blob[-4:] == TFRecordWriter.masked_crc(blob[12:-4])


def manifest_exts(out: Path) -> dict:
    """{key: ext} as the manifest records them."""
    m = open_manifest(out)
    return {key: m.extensions[int(e)] for key, e in zip(m.keys(), m.samples.ext.tolist())}


def test_stock_webdataset_sees_each_samples_ext_as_its_member_suffix(packed_mixed):
    import webdataset

    out = packed_mixed("wds")
    urls = sorted(str(p) for p in out.glob("shard-*.tar"))
    seen = {s["__key__"]: next(k for k in s if not k.startswith("__") and k != "cls")
            for s in webdataset.WebDataset(urls, shardshuffle=False)}
    assert seen == manifest_exts(out) and {"jpg", "png", "avi", "mp4", "txt", "md"} <= set(seen.values())


def test_stock_tfrecord_package_reads_the_ext_feature(packed_mixed):
    from tfrecord.reader import tfrecord_loader

    out = packed_mixed("tfrecord")
    seen = {}
    for shard in sorted(out.glob("shard-*.tfrecord")):
        for record in tfrecord_loader(str(shard), None, {"key": "byte", "ext": "byte", "label": "int"}):
            seen[bytes(record["key"]).decode("utf-8")] = bytes(record["ext"]).decode("utf-8")
    assert seen == manifest_exts(out) and {"jpg", "png", "avi", "mp4", "txt", "md"} <= set(seen.values())


TF_DATA_READ = """
import json, sys
import tensorflow as tf
spec = {"key": tf.io.FixedLenFeature([], tf.string), "ext": tf.io.FixedLenFeature([], tf.string),
        "data": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64),
        "size": tf.io.FixedLenFeature([], tf.int64)}
rows = {}
for example in tf.data.TFRecordDataset(sys.argv[1:]).map(lambda record: tf.io.parse_single_example(record, spec)):
    rows[example["key"].numpy().decode("utf-8")] = [example["ext"].numpy().decode("utf-8"),
                                                    int(example["label"]), int(example["size"])]
print(json.dumps(rows))
"""


def test_tf_data_reads_every_feature_including_ext(packed_mixed):
    """tf.data in a fresh interpreter, as a user runs it: the `tfrecord` package (imported by other tests)
    registers the same proto names as tensorflow, and one process cannot hold both."""
    if importlib.util.find_spec("tensorflow") is None:  # looked up, not imported: see the docstring
        pytest.skip("tf.data check: pip install tensorflow-cpu")
    out = packed_mixed("tfrecord")
    m = open_manifest(out)
    paths = [str(out / shard.path) for shard in m.shards]
    done = subprocess.run([sys.executable, "-c", TF_DATA_READ, *paths], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    want = {key: [m.extensions[int(e)], int(label), int(size)] for key, e, label, size in
            zip(m.keys(), m.samples.ext.tolist(), m.samples.label.tolist(), m.samples.size.tolist())}
    assert rows == want

"""packing.sources.tfrecord: TFRecord files of tf.train.Example read as a SOURCE, CRCs checked, damage reported."""
from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from tfrecord import TFRecordWriter
from tfrecord.tools.tfrecord2idx import create_index

from corgi_io.errors import ArgumentError, BadInput
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit, list_units, read_unit

FEATURES = {"jpg": "image/encoded", "txt": "image/text", "label": "image/class/label"}


def write_records(path, records, index=False):
    """A TFRecord file written by the `tfrecord` package; with its `.index` sidecar when asked."""
    writer = TFRecordWriter(str(path))
    for record in records:
        writer.write(record)
    writer.close()
    if index:
        create_index(str(path), f"{path}.index")
    return str(path)


def record(i, **extra):
    return {"image/encoded": (b"\xff\xd8" + bytes([i]), "byte"), "image/text": (f"text {i}".encode(), "byte"),
            "image/class/label": (i, "int"), **extra}


def expected(i, key=None):
    return PackSample(key or f"train-0/{i}", i, {"jpg": b"\xff\xd8" + bytes([i]), "txt": f"text {i}".encode()})


def read(path, features=FEATURES, **options):
    """(samples, skip messages) of one file."""
    messages = []
    samples = list(read_unit(Unit("tfrecord", str(path)), features=features, on_skip=messages.append, **options))
    return samples, messages


def offsets(path):
    """The byte offset of each record of a well-formed file."""
    data, found, position = Path(path).read_bytes(), [], 0
    while position < len(data):
        found.append(position)
        position += 16 + struct.unpack("<Q", data[position:position + 8])[0]
    return found


@pytest.mark.parametrize("index", [False, True])
def test_records_come_out_exactly_as_written_with_or_without_index(tmp_path, index):
    path = write_records(tmp_path / "train-0.tfrecord", [record(i) for i in range(3)], index=index)
    assert list_units(str(tmp_path)) == [Unit("tfrecord", path)]
    assert read(path) == ([expected(i) for i in range(3)], [])


def test_a_key_feature_names_the_samples_and_a_bytes_label_is_digits(tmp_path):
    path = write_records(tmp_path / "t.tfrecords", [
        {"name": (b"cats/a", "byte"), "img": (b"A", "byte"), "cls": (b"7", "byte")},
        {"name": (b"../b", "byte"), "img": (b"B", "byte"), "cls": (b"1", "byte")},
        {"name": (b"cats/c", "byte"), "img": (b"C", "byte"), "cls": (b"x", "byte")},
    ])
    starts = offsets(path)
    samples, messages = read(path, {"png": "img", "key": "name", "label": "cls"})
    assert samples == [PackSample("cats/a", 7, {"png": b"A"})]
    assert messages == [f"skipped {path}: record 1 at byte offset {starts[1]}: key '../b' has a '..' component",
                        (f"skipped {path}: record 2 at byte offset {starts[2]}: label b'x' is not an integer from 0 to "
                        f"2147483647")]


def test_a_record_without_a_mapped_feature_or_with_another_type_is_skipped_alone(tmp_path):
    path = write_records(tmp_path / "train-0.tfrecord", [
        record(0), {"image/encoded": (b"x", "byte")}, record(2, **{"image/text": (5, "int")}), record(3)])
    starts = offsets(path)
    samples, messages = read(path)
    assert samples == [expected(0), expected(3)]
    assert messages == [
        f"skipped {path}: record 1 at byte offset {starts[1]}: has no feature 'image/text' (for 'txt')",
        f"skipped {path}: record 2 at byte offset {starts[2]}: feature 'image/text' is int64, not bytes (for 'txt')"]


def damaged(tmp_path, change):
    """A copy of a good 3-record file changed by `change(bytearray, record offsets)`, and the record offsets."""
    good = write_records(tmp_path / "train-0.tfrecord", [record(i) for i in range(3)], index=True)
    data, starts = bytearray(Path(good).read_bytes()), offsets(good)
    path = tmp_path / "bad" / "train-0.tfrecord"
    path.parent.mkdir()
    path.write_bytes(bytes(change(data, starts)))
    return str(path), starts


def flip(data, position):
    data[position] ^= 0x01
    return data


@pytest.mark.parametrize("change, where, problem", [
    (lambda data, starts: flip(data, starts[1] + 9), 1, "length CRC mismatch"),
    (lambda data, starts: flip(data, starts[1] + 2), 1, "length CRC mismatch"),  # the length itself
    (lambda data, starts: flip(data, starts[2] - 2), 1, "data CRC mismatch"),
    (lambda data, starts: flip(data, starts[1] + 20), 1, "data CRC mismatch"),  # the Example
    (lambda data, starts: data[:starts[2] + 30], 2, "truncated: the record of 82 bytes runs past the end of the file"),
    (lambda data, starts: data[:starts[2] + 5], 2, "truncated: a record head of 5 of 12 bytes"),
], ids=["length-crc", "length", "data-crc", "data", "truncated-body", "truncated-head"])
def test_damage_is_one_line_naming_file_and_offset_and_ends_the_file(tmp_path, change, where, problem):
    path, starts = damaged(tmp_path, change)
    message = f"{path}: byte offset {starts[where]}: {problem}; the rest of the file is not read"
    assert read(path) == ([expected(i) for i in range(where)], [f"skipped {message}"])
    with pytest.raises(BadInput, match="^" + re.escape(message) + "$"):
        read(path, strict=True)


def test_a_record_above_the_limit_is_not_read(tmp_path):
    path = write_records(tmp_path / "train-0.tfrecord", [record(0), {"image/encoded": (b"x" * 5000, "byte")}])
    starts = offsets(path)
    length, big = starts[1] - 16, Path(path).stat().st_size - starts[1] - 16
    assert read(path, max_record_bytes=length) == (
        [expected(0)], [(f"skipped {path}: byte offset {starts[1]}: a record of {big} bytes, above "
                        f"max_record_bytes={length}; the rest of the file is not read")])


def test_the_features_mapping_is_checked(tmp_path):
    path = write_records(tmp_path / "train-0.tfrecord", [record(0)])
    for bad in ({}, {"label": "image/class/label"}, {"JPG": "image/encoded"}, {"jpg": 3}):
        with pytest.raises(ArgumentError):
            read(path, bad)

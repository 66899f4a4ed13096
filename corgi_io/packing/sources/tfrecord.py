"""TFRecord files of tf.train.Example records as a SOURCE, read in order with both CRCs checked.

`features` maps names to Example features: ``{"jpg": "image/encoded", "txt": "image/text",
"label": "image/class/label", "key": "image/filename"}``.  A name is a field name, or ``label``
(an int64 feature, or a bytes one holding decimal digits) or ``key`` (a bytes feature, UTF-8, obeying
the key rule); without ``key`` a sample's key is ``<file stem>/<record index>``.  A field's feature
must hold one bytes value.

Each record is framed as ``uint64 length | masked crc32c(length) | Example | masked crc32c(Example)``
(`corgi_io.formats.tfrecord`).  A bad length CRC, a record above `max_record_bytes`, a bad data CRC
or a truncated record is reported once with the file and byte offset, and the rest of the file is
not read: a length that cannot be trusted cannot be skipped past (BadInput under `strict`).  A
record whose framing is sound but whose Example lacks a mapped feature, or holds one of another
type, is skipped alone.  ``.index`` sidecars are not needed (records are read in order) and are
not units.  Memory: one record at a time, at most `max_record_bytes`.
"""
from __future__ import annotations

import posixpath
import struct

from corgi_io.errors import BadInput
from corgi_io.formats.example_proto import decode_example
from corgi_io.formats.tfrecord import FRAME, masked_crc
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit
from corgi_io.packing.sources.values import check_field_mapping, open_binary, sample_from_values, skip_or_raise

SUFFIXES = (".tfrecord", ".tfrecords")
MAX_RECORD_BYTES = 1 << 30


def units(path: str):
    """One unit: the whole file (record boundaries are known only by reading it)."""
    return [Unit("tfrecord", path)]


def read(unit: Unit, *, features: dict, strict: bool = False, on_skip=None,
         max_record_bytes: int = MAX_RECORD_BYTES):
    """The samples of one TFRecord file, in record order (see the module docstring for what is skipped)."""
    check_field_mapping("features", features, "feature name")
    name = posixpath.basename(unit.path)
    stem = next((name[:-len(end)] for end in SUFFIXES if name.lower().endswith(end)), name)
    with open_binary(unit.path) as file:
        for index, (offset, example) in enumerate(_records(unit.path, file, max_record_bytes, strict, on_skip)):
            try:
                yield _sample(example, features, f"{stem}/{index}")
            except BadInput as exc:
                skip_or_raise(f"{unit.path}: record {index} at byte offset {offset}: {exc}", strict, on_skip)


def _records(path: str, file, max_record_bytes: int, strict: bool, on_skip):
    """(byte offset, Example bytes) of each record whose framing and CRCs check; the first bad frame is
    reported and ends the file."""
    offset = 0
    while True:
        head = file.read(12)
        if not head:
            return
        problem, length = _frame_problem(head, max_record_bytes)
        if problem is None:
            body = file.read(length + 4)
            if len(body) < length + 4:
                problem = f"truncated: the record of {length} bytes runs past the end of the file"
            elif body[-4:] != masked_crc(body[:-4]):
                problem = "data CRC mismatch"
        if problem is not None:
            return skip_or_raise(f"{path}: byte offset {offset}: {problem}; the rest of the file is not read",
                                 strict, on_skip)
        yield offset, body[:-4]
        offset += FRAME + length


def _frame_problem(head: bytes, max_record_bytes: int):
    """(what is wrong with a record's 12-byte head or None, the record's length)."""
    if len(head) < 12:
        return f"truncated: a record head of {len(head)} of 12 bytes", 0
    if head[8:12] != masked_crc(head[:8]):
        return "length CRC mismatch", 0
    (length,) = struct.unpack("<Q", head[:8])
    if length > max_record_bytes:
        return f"a record of {length} bytes, above max_record_bytes={max_record_bytes}", 0
    return None, length


def _sample(example: bytes, features: dict, default_key: str) -> PackSample:
    """The PackSample of one Example by the `features` mapping; BadInput naming what is missing or wrong."""
    try:
        decoded = decode_example(example)
    except ValueError as exc:  # the parser's only error for malformed bytes (UnicodeDecodeError is one)
        raise BadInput(f"not a tf.train.Example ({type(exc).__name__}: {exc})") from None
    values = {name: _feature(example, decoded, feature, name) for name, feature in features.items()}
    if "key" in values:
        values["key"] = _text(values["key"])
    return sample_from_values(values, default_key)


def _feature(example: bytes, decoded: dict, feature: str, name: str):
    """The one value of `feature`: bytes for a bytes feature, an int for an int64 one; BadInput otherwise."""
    if feature not in decoded:
        raise BadInput(f"has no feature {feature!r} (for {name!r})")
    values = decoded[feature]
    if len(values) != 1:
        raise BadInput(f"feature {feature!r} holds {len(values)} values, not one (for {name!r})")
    value = values[0]
    if isinstance(value, tuple):
        return example[value[0]:value[1]]
    if name != "label":
        raise BadInput(f"feature {feature!r} is int64, not bytes (for {name!r})")
    return value


def _text(value: bytes) -> str:
    """A key feature's bytes as text; BadInput when they are not UTF-8."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"key {value[:40]!r} is not UTF-8") from None

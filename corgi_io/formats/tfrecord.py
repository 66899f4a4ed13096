"""TFRecord shards: tf.train.Example records with masked CRC32C framing.

Each record is ``uint64 length | masked crc32c(length) | Example bytes | masked crc32c(Example)``
with features ``key`` (bytes), ``data`` (the primary field: the original file bytes), ``ext``
(bytes: the primary field's name, the original file's lower-case extension without the dot,
empty when it had none), ``label`` (int64, -1 when unlabeled), ``size`` (int64), and one bytes
feature per other field of the sample, named by the field (``txt``, ``json``).  Each shard gets tfrecord's ``.index`` sidecar
(``offset length`` per line; `write_sidecars` writes it, `parse_index` reads it back), so
`tfrecord.torch.TFRecordDataset(path, index_path)` and `tf.data.TFRecordDataset` read our
shards unchanged.  CRC32C comes from the `crc32c`
package (the one `tfrecord` uses); Examples from `example_proto` (see its docstring for why
not the `tfrecord` package itself).
"""
from __future__ import annotations

import re
import struct

import crc32c
import numpy as np

from corgi_io.errors import FormatError
from corgi_io.formats import RESERVED_FIELDS, FieldSpan, Record
from corgi_io.formats.example_proto import encode_example, feature_entries

SUFFIX = ".tfrecord"
TRAILER = b""
FRAME = 8 + 4 + 4  # length, crc of length, crc of data
CRC_MASK_DELTA = 0xA282EAD8
INDEX_SUFFIX = ".index"
INDEX_LINE_BYTES = 38  # the longest line `parse_index` accepts: two 18-digit numbers, a space, a newline
_INDEX_LINE = re.compile(rb"[0-9]{1,18} [0-9]{1,18}")


def masked_crc(*parts) -> bytes:
    """TFRecord's masked CRC32C of the concatenated parts: rotate right by 15 bits, add a constant, little-endian."""
    crc = 0
    for part in parts:
        crc = crc32c.crc32c(part, crc)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF)


def encode(key: str, ext: str, data: bytes, label: int, size: int, extra=()):
    """Framed record for one sample, `extra` ((name, bytes) pairs) as features of their own names: (list of byte
    strings, a FieldSpan per field relative to the record: its feature's map entry and bytes value, in record order)."""
    values = {**dict(extra), "data": data}
    example, offsets = encode_example({**values, "key": key.encode("utf-8"), "ext": ext.encode("utf-8")},
                                      {"label": label, "size": size})
    length_bytes = struct.pack("<Q", sum(len(part) for part in example))
    spans = sorted((FieldSpan(ext if feature == "data" else feature, 12 + offsets[feature][0],
                              12 + offsets[feature][1], len(value)) for feature, value in values.items()),
                   key=lambda span: span.header)
    return [length_bytes, masked_crc(length_bytes), *example, masked_crc(*example)], tuple(spans)


def estimate_record_bytes(nbytes, key_bytes, fields=1):
    """Record size from payload and key lengths (within a few bytes: varint and extension lengths vary)."""
    return FRAME + nbytes + key_bytes + 100 + (fields - 1) * 80


def write_sidecars(shard_path, offsets, lengths) -> list:
    """tfrecord's ``.index`` file: one ``offset length`` line per record."""
    from corgi_io.storage.atomic import write_atomic

    index_path = f"{shard_path}{INDEX_SUFFIX}"
    write_atomic(index_path, "".join(f"{o} {n}\n" for o, n in zip(offsets, lengths)).encode())
    return [index_path]


def parse_index(data: bytes) -> np.ndarray:
    """The (offset, length) rows of an ``.index`` sidecar, as an int64 array of shape (records, 2).

    The sidecar is untrusted: every line must be two decimal numbers of at most 18 digits
    (so they fit int64) separated by one space and ended by a newline.  Anything else
    raises FormatError with the byte offset, in the sidecar, of the first bad line.
    Callers bound the size before reading (at most `INDEX_LINE_BYTES` per record).
    """
    lines = data.split(b"\n")
    position = 0
    for line in lines[:-1]:
        if not _INDEX_LINE.fullmatch(line):
            raise FormatError(position, f"not an 'offset length' line: {bytes(line[:40])!r}")
        position += len(line) + 1
    if lines[-1]:
        raise FormatError(position, "the last line has no newline (truncated)")
    return np.array(data.split(), dtype=np.int64).reshape(-1, 2)


def parse_block(buffer, base_offset: int = 0):
    """Parse whole records from one block's bytes, checking both CRCs of every record."""
    buffer = memoryview(buffer)
    position = 0
    while position < len(buffer):
        where = base_offset + position
        if len(buffer) - position < FRAME:
            raise FormatError(where, "truncated TFRecord frame")
        length_bytes = bytes(buffer[position: position + 8])
        if bytes(buffer[position + 8: position + 12]) != masked_crc(length_bytes):
            raise FormatError(where, "TFRecord length CRC mismatch")
        (length,) = struct.unpack("<Q", length_bytes)
        end = position + 12 + length + 4
        if end > len(buffer):
            raise FormatError(where, f"TFRecord record of {length} bytes runs past the end of the data")
        example = buffer[position + 12: end - 4]
        if bytes(buffer[end - 4: end]) != masked_crc(example):
            raise FormatError(where, "TFRecord data CRC mismatch")
        yield _record(example, where, end - position)
        position = end


def _record(example, offset: int, length: int) -> Record:
    """The Record of one Example: the primary field from ``data`` (named by ``ext``), the others by feature name,
    each with its FieldSpan (the feature's map entry and bytes value)."""
    base = offset + 12  # where the Example starts in the shard
    try:
        features = {name: (at, values) for name, at, values in feature_entries(example)}
        (key_start, key_end), label = features["key"][1][0], features["label"][1][0]
        key = bytes(example[key_start:key_end]).decode("utf-8")
        ext = bytes(example[slice(*features["ext"][1][0])]).decode("utf-8") if features.get("ext", (0, ()))[1] else ""
        names = ["data", *(name for name, (_, values) in features.items() if name not in RESERVED_FIELDS and values
                           and isinstance(values[0], tuple))]
        spans = [_field_span(ext if name == "data" else name, *features[name], base) for name in names]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise FormatError(offset, f"not a corgi tf.train.Example ({type(exc).__name__}: {exc})") from None
    fields = tuple((span.name, bytes(example[span.offset - base:span.offset - base + span.length])) for span in spans)
    return Record(key, fields[0][1], label, offset, length, spans[0].offset, fields,
                  tuple(sorted(spans, key=lambda span: span.header)))


def _field_span(name: str, at: int, values: list, base: int) -> FieldSpan:
    """The FieldSpan of a bytes feature whose map entry starts at `at` of an Example that starts at `base`."""
    start, end = values[0]  # an int feature under a field's name: TypeError
    return FieldSpan(name, base + at, base + start, end - start)

"""TFRecord shards: tf.train.Example records with masked CRC32C framing, via the `tfrecord` package.

Each record is ``uint64 length | masked crc32c(length) | Example bytes | masked crc32c(Example)``
with features ``key`` (bytes), ``data`` (the original file bytes), ``label`` (int64, -1 when
unlabeled) and ``size`` (int64).  Each shard gets tfrecord's ``.index`` sidecar
(``offset length`` per line), so `tfrecord.torch.TFRecordDataset(path, index_path)` and
`tf.data.TFRecordDataset` read our shards unchanged.
"""
from __future__ import annotations

import struct

from tfrecord import example_pb2
from tfrecord.writer import TFRecordWriter

from corgi_io.formats import FormatError, Record

SUFFIX = ".tfrecord"
TRAILER = b""
FRAME = 8 + 4 + 4  # length, crc of length, crc of data


def encode(key: str, ext: str, data: bytes, label: int, size: int):
    """Framed record for one sample: (list of byte strings, payload offset in the record)."""
    example = TFRecordWriter.serialize_tf_example({
        "key": (key.encode("utf-8"), "byte"),
        "data": (data, "byte"),
        "label": (label, "int"),
        "size": (size, "int"),
    })
    length = struct.pack("<Q", len(example))
    parts = [length, TFRecordWriter.masked_crc(length), example, TFRecordWriter.masked_crc(example)]
    # the payload is stored contiguously inside the Example; any match is byte-identical to it
    return parts, 12 + example.find(data)


def estimate_record_bytes(nbytes, key_bytes):
    """Record size from payload and key lengths (within a few bytes of protobuf varints)."""
    return FRAME + nbytes + key_bytes + 80


def write_sidecars(shard_path, offsets, lengths) -> list:
    """tfrecord's ``.index`` file: one ``offset length`` line per record."""
    from corgi_io.storage import write_atomic

    index_path = f"{shard_path}.index"
    write_atomic(index_path, "".join(f"{o} {n}\n" for o, n in zip(offsets, lengths)).encode())
    return [index_path]


def parse_block(buffer, base_offset: int = 0):
    """Parse whole records from one block's bytes, checking both CRCs of every record."""
    buffer = memoryview(buffer)
    position = 0
    while position < len(buffer):
        where = base_offset + position
        if len(buffer) - position < FRAME:
            raise FormatError(where, "truncated TFRecord frame")
        length_bytes = bytes(buffer[position: position + 8])
        if bytes(buffer[position + 8: position + 12]) != TFRecordWriter.masked_crc(length_bytes):
            raise FormatError(where, "TFRecord length CRC mismatch")
        (length,) = struct.unpack("<Q", length_bytes)
        end = position + 12 + length + 4
        if end > len(buffer):
            raise FormatError(where, f"TFRecord record of {length} bytes runs past the end of the data")
        example_bytes = bytes(buffer[position + 12: end - 4])
        if bytes(buffer[end - 4: end]) != TFRecordWriter.masked_crc(example_bytes):
            raise FormatError(where, "TFRecord data CRC mismatch")
        yield _record(example_bytes, where, end - position)
        position = end


def _record(example_bytes: bytes, offset: int, length: int) -> Record:
    example = example_pb2.Example()
    try:
        example.ParseFromString(example_bytes)
        feature = example.features.feature
        data = feature["data"].bytes_list.value[0]
        key = feature["key"].bytes_list.value[0].decode("utf-8")
        label = int(feature["label"].int64_list.value[0])
    except Exception as exc:  # protobuf raises its own DecodeError; a missing feature IndexError
        raise FormatError(offset, f"not a corgi tf.train.Example ({type(exc).__name__}: {exc})") from None
    return Record(key, data, label, offset, length, offset + 12 + example_bytes.find(data))

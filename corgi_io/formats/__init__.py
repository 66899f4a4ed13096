"""Shard formats.  Each module offers the same small surface:

* ``SUFFIX`` - the shard file suffix;
* ``encode(key, ext, data, label, size) -> (record parts, payload offset in the record)``;
* ``TRAILER`` - bytes that close a shard;
* ``estimate_record_bytes(nbytes, key_bytes)`` - record size before the file is read;
* ``parse_block(buffer, base_offset) -> iterator of Record`` - parse whole samples from a byte range;
* ``write_sidecars(shard_path, offsets, lengths)`` - files that stock readers want beside a shard.
"""
from __future__ import annotations

from typing import NamedTuple

from corgi_io.errors import ArgumentError, FormatError  # noqa: F401  (FormatError re-exported: formats raise it)


class Record(NamedTuple):
    """One sample parsed back from shard bytes; offsets are absolute in the shard."""

    key: str
    data: bytes
    label: int
    offset: int
    length: int
    data_offset: int


def get_format(name: str):
    """The module implementing shard format `name` ('wds' or 'tfrecord')."""
    if name == "wds":
        from corgi_io.formats import wds
        return wds
    if name == "tfrecord":
        from corgi_io.formats import tfrecord
        return tfrecord
    raise ArgumentError(f"unknown shard format {name!r}: expected 'wds' or 'tfrecord'")

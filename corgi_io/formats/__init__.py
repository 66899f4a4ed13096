"""Shard formats.  Each module offers the same small surface:

* ``SUFFIX`` - the shard file suffix;
* ``encode(key, ext, data, label, size) -> (record parts, payload offset in the record)``;
* ``TRAILER`` - bytes that close a shard;
* ``estimate_record_bytes(nbytes, key_bytes)`` - record size before the file is read;
* ``parse_block(buffer, base_offset) -> iterator of Record`` - parse whole samples from a byte range;
* ``write_sidecars(shard_path, offsets, lengths)`` - files that stock readers want beside a shard.
"""
from __future__ import annotations

import importlib
from typing import NamedTuple

from corgi_io.arguments import choose
from corgi_io.errors import FormatError  # noqa: F401  (re-exported: formats raise it)

# The registry: format name -> its module, imported on first use.  A new format is one entry.
FORMAT_MODULES = {"wds": "corgi_io.formats.wds", "tfrecord": "corgi_io.formats.tfrecord"}
FORMATS = tuple(FORMAT_MODULES)


class Record(NamedTuple):
    """One sample parsed back from shard bytes; offsets are absolute in the shard."""

    key: str
    data: bytes
    label: int
    offset: int
    length: int
    data_offset: int


def get_format(name: str):
    """The module implementing shard format `name` (one of FORMATS); ArgumentError listing them otherwise."""
    return importlib.import_module(choose("format", name, FORMAT_MODULES))

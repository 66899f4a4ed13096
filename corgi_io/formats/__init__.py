"""Shard formats.  Each module offers the same small surface:

* ``SUFFIX`` - the shard file suffix;
* ``encode(key, ext, data, label, size, extra=()) -> (record parts, field spans)``: `data` is the primary field
  (named `ext`), `extra` the sample's other fields as (name, bytes) pairs; the spans are a `FieldSpan` per field,
  relative to the record's start, in the order the record holds them;
* ``TRAILER`` - bytes that close a shard;
* ``estimate_record_bytes(nbytes, key_bytes, fields=1)`` - record size before the files are read;
* ``parse_block(buffer, base_offset) -> iterator of Record`` - parse whole samples, fields and all (and each
  field's `FieldSpan`, absolute), from a byte range;
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
# Names no extra field may take: the label member (cls), the TFRecord features and the loader's sample dict keys.
RESERVED_FIELDS = frozenset({"cls", "key", "ext", "data", "label", "size", "index", "kind", "fields"})


class FieldSpan(NamedTuple):
    """Where one field of a sample lies: its framing from `header` to `offset`, its payload `length` bytes from
    `offset`.  The framing is a tar member's header blocks (a pax header's included), or the TFRecord feature's
    map entry up to its bytes value (its name and protobuf tags)."""

    name: str
    header: int
    offset: int
    length: int


class Record(NamedTuple):
    """One sample parsed back from shard bytes; offsets are absolute in the shard."""

    key: str
    data: bytes
    label: int
    offset: int
    length: int
    data_offset: int
    fields: tuple = ()  # every field as (name, bytes), the primary (`data`) first
    spans: tuple = ()   # a FieldSpan per field, in shard order


def get_format(name: str):
    """The module implementing shard format `name` (one of FORMATS); ArgumentError listing them otherwise."""
    return importlib.import_module(choose("format", name, FORMAT_MODULES))

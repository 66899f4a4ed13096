"""The worker side of `corgi pack`: read the files of one planned block, probe sizes, encode records.

A block's bytes do not depend on where the block lands in its shard (neither tar
headers nor TFRecord framing hold offsets), so blocks are encoded in parallel worker
processes and the parent only appends them in order.  A worker process spills its block
to a file that the parent appends with an in-kernel copy: sending the bytes back through
the process pool's pipe cost as much as encoding them (bench/pack.py, 38 MB: +55 ms).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from corgi_io.checksum import DEFAULT_CHECKSUM, checksum_function
from corgi_io.packing.corpus import not_regular_reason, printable
from corgi_io.formats import get_format
from corgi_io.errors import BadInput
from corgi_io.packing.sizing import load_size_fn, probe_size


class Item(NamedTuple):
    """One file to pack: its place in the packing order and what goes into its record."""

    position: int
    path: str
    kind: str
    key: str
    ext: str
    label: int


@dataclass
class EncodedBlock:
    """Record bytes of one block plus per-sample columns; offsets are relative to the block start."""

    data: bytes = b""
    spill_path: str | None = None  # set instead of `data` when the block was spilled to a file
    position: list = field(default_factory=list)
    offset: list = field(default_factory=list)
    length: list = field(default_factory=list)
    data_offset: list = field(default_factory=list)
    size: list = field(default_factory=list)
    checksum: list = field(default_factory=list)  # running DEFAULT_CHECKSUM of the block's records (checksum.py)
    skipped: list = field(default_factory=list)  # (position, path, reason)
    payload_bytes: int = 0


def read_regular_file(path: str) -> bytes:
    """The bytes of the regular file at `path`; anything else raises BadInput without being read.

    The walk already kept only regular files, but the path may have been swapped since: opened
    with O_NONBLOCK, a FIFO without a writer cannot block the open, and fstat on the open
    descriptor decides, so nothing but a regular file is ever read (O_NONBLOCK does not affect those).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with open(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(not_regular_reason(mode))
        return f.read()


def encode_block(format_name: str, size_fn_spec, items, spill_path: str | None = None) -> EncodedBlock:
    """Read, probe and encode `items` in order; unreadable or corrupt files are listed in `skipped`.

    With `spill_path`, the record bytes go to that file instead of `data`.
    """
    fmt, checksum = get_format(format_name), checksum_function(DEFAULT_CHECKSUM)
    size_fn = load_size_fn(size_fn_spec) if size_fn_spec else None
    block, parts, position, crc = EncodedBlock(), [], 0, 0  # crc runs through the block's records
    for item in items:
        try:
            payload = read_regular_file(item.path)
            size = probe_size(item.kind, item.path, payload, size_fn)
        except BadInput as exc:
            block.skipped.append((item.position, printable(item.path), str(exc)))
            continue
        except OSError as exc:
            block.skipped.append((item.position, printable(item.path), f"unreadable: {exc.strerror or exc}"))
            continue
        record, data_offset = fmt.encode(item.key, item.ext, payload, item.label, size)
        length = 0
        for part in record:
            crc = checksum(part, crc)
            length += len(part)
        parts += record
        for column, value in ((block.position, item.position), (block.offset, position), (block.length, length),
                              (block.data_offset, position + data_offset), (block.size, size), (block.checksum, crc)):
            column.append(value)
        position += length
        block.payload_bytes += len(payload)
    if spill_path is None:
        block.data = b"".join(parts)
    else:
        with open(spill_path, "wb") as spill:
            spill.writelines(parts)
        block.spill_path = spill_path
    return block

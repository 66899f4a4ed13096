"""Writing one shard: records in order, byte offsets and checksums noted, renamed into place when whole.

The shard is written under a temporary name; on `finish` its resume record (the
per-sample offsets, sizes and CRCs) is saved, then the shard is renamed to its final
name.  A shard file under its final name is therefore always complete, and a pack
interrupted at any point can be resumed from the shards that exist.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from corgi_io.storage import write_atomic

COLUMNS = ("index", "block", "offset", "length", "data_offset", "size", "crc32")


class ShardWriter:
    """Appends encoded samples to one shard file of a given format."""

    def __init__(self, fmt, path: Path, resume_path: Path):
        self.fmt, self.path, self.resume_path = fmt, Path(path), Path(resume_path)
        self.temp_path = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self.file = open(self.temp_path, "wb", buffering=1 << 20)
        self.position = 0
        self.columns = {name: [] for name in COLUMNS}
        self.skipped = []

    def add(self, index: int, block: int, key: str, ext: str, data: bytes, label: int, size: int) -> None:
        """Append sample `index` (its place in the packing order) of planned block `block`."""
        parts, data_offset = self.fmt.encode(key, ext, data, label, size)
        crc, length = 0, 0
        for part in parts:
            self.file.write(part)
            crc = zlib.crc32(part, crc)
            length += len(part)
        for name, value in zip(COLUMNS, (index, block, self.position, length, self.position + data_offset, size, crc)):
            self.columns[name].append(value)
        self.position += length

    def skip(self, relpath: str, reason: str) -> None:
        self.skipped.append({"path": relpath, "reason": reason})

    def finish(self) -> dict:
        """Close the shard, save its resume record, rename it into place; returns the resume record."""
        self.file.write(self.fmt.TRAILER)
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        record = dict(self.columns, bytes=self.position + len(self.fmt.TRAILER), skipped=self.skipped)
        self.fmt.write_sidecars(self.path, self.columns["offset"], self.columns["length"])
        write_atomic(self.resume_path, json.dumps(record).encode())
        os.replace(self.temp_path, self.path)
        return record

    def abort(self) -> None:
        """Drop the temporary file of an unfinished shard."""
        self.file.close()
        self.temp_path.unlink(missing_ok=True)


def load_finished(path: Path, resume_path: Path):
    """The resume record of a shard that was finished earlier, or None if it must be rewritten."""
    try:
        record = json.loads(Path(resume_path).read_bytes())
        return record if os.path.getsize(path) == record["bytes"] else None
    except (OSError, ValueError, KeyError):
        return None

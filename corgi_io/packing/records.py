"""Per-shard records: what each finished shard holds, on disk from the moment the shard is done.

A shard task saves its record as ``.corgi-partial/<shard>.rec`` before it renames the shard into
place, so a shard under its final name always has one, and a pack killed at any moment resumes
from the shards that exist.  A record is an uncompressed .npz (read back with
``allow_pickle=False``): the per-sample columns of the shard, and a small JSON summary.  The
driver keeps only the summaries (`ShardDone`, a few numbers per shard); the manifest reads the
columns back one at a time when it is written.
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corgi_io.storage.atomic import atomic_output

SAMPLE_FIELDS = {  # per written sample, in shard order
    "position": np.int64,     # its place in pack order (a row of the pack-order table)
    "offset": np.int64,       # record start in the shard
    "length": np.int64,
    "data_offset": np.int64,  # primary payload start in the shard
    "bytes": np.int64,        # primary payload bytes
    "size": np.int64,         # the probed size
    "checksum": np.uint32,    # running CRC32C through its block (checksum.py)
    "kind": np.uint8,         # its primary field's kind (index into manifest.KINDS)
    "ext": np.uint16,         # its primary field's name: index into the record's `extensions`
    "fields": np.uint64,      # bit i: it has the record's field `field_names[i]` (field_masks.py)
}
SUFFIX = ".rec"


@dataclass(frozen=True)
class ShardDone:
    """What a finished shard task sends back: a few numbers and the inputs it skipped."""

    shard: int
    bytes: int          # the shard file's size
    samples: int
    payload_bytes: int  # the packed files' bytes, for the progress display
    skipped: tuple      # ({"path", "reason"}, ...) in shard order
    field_names: tuple = ()   # the task's field names: the bits of its masks
    extensions: tuple = ()    # the task's primary field names: its ext ids
    max_fields: int = 0       # the most fields one of its samples has

    @property
    def progress(self) -> tuple:
        """(samples handled, payload bytes): what the task reports, for executors that cannot relay it live."""
        return self.samples + len(self.skipped), self.payload_bytes


def record_path(partial: Path, shard_name: str) -> Path:
    return Path(partial) / f"{shard_name}{SUFFIX}"


def save_record(path, done: ShardDone, columns: dict) -> None:
    """Write a shard's record atomically (temporary name, fsync, rename)."""
    summary = json.dumps(dict(done.__dict__, skipped=list(done.skipped))).encode("utf-8")
    with atomic_output(path) as f:
        np.savez(f, summary=np.frombuffer(summary, dtype=np.uint8),
                 **{name: np.asarray(columns[name], dtype=dtype) for name, dtype in SAMPLE_FIELDS.items()})


def load_finished(shard_path, path):
    """The ShardDone of a shard finished by an earlier run, or None if it must be (re)written."""
    try:
        with np.load(path, allow_pickle=False) as record:
            summary = json.loads(record["summary"].tobytes())
        done = ShardDone(**{name: tuple(value) if isinstance(value, list) else value for name, value in summary.items()})
        if not done.extensions and done.samples:  # a record of a version without the task's names: rewrite
            return None
        return done if os.path.getsize(shard_path) == done.bytes else None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return None


def load_column(path, name: str) -> np.ndarray:
    """One per-sample column of a shard's record."""
    with np.load(path, allow_pickle=False) as record:
        return record[name]

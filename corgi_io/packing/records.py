"""A packed unit's record: what its shards hold, saved before they are renamed into place.

A write task (unit_task.py) collects its samples' columns in `UnitColumns`, compactly (array
columns, the keys in one byte string: no object per sample), and saves them as
``.corgi-partial/unit-<n>.rec``, an uncompressed .npz read back with ``allow_pickle=False``, with
a small JSON summary (`UnitDone`: shard names and sizes, counts, skips, and the unit's own field
names and extensions, which its masks and extension ids index).  A shard under its final name
therefore always has its record, and a pack killed at any moment resumes from the units whose
record and shards exist (`load_done`).  The driver keeps the summaries and reads the columns back
one at a time to write the manifest (manifest_columns.py).
"""
from __future__ import annotations

import array
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corgi_io.packing.field_masks import TaskNames
from corgi_io.packing.keys import stable_key_hash
from corgi_io.storage.atomic import atomic_output

RECORD_COLUMNS = {  # per written sample, in unit order: (array typecode, numpy dtype)
    "shard": ("I", np.uint32),       # the unit's shard it is in (0, 1, ...)
    "block": ("q", np.int64),        # the unit's block it is in
    "offset": ("q", np.int64),       # record start in its shard
    "length": ("q", np.int64),
    "data_offset": ("q", np.int64),  # primary payload start in its shard
    "bytes": ("q", np.int64),        # primary payload bytes
    "size": ("q", np.int64),         # the primary field's size (pixels, frames, tokens)
    "checksum": ("I", np.uint32),    # running CRC32C through its block (checksum.py)
    "kind": ("B", np.uint8),         # index into manifest.KINDS
    "ext": ("H", np.uint16),         # index into the unit's extensions: its primary field's name
    "label": ("i", np.int32),        # class id, -1: unlabeled
    "fields": ("Q", np.uint64),      # bit i: it has the unit's field i
    "key_hash": ("q", np.int64),     # keys.stable_key_hash of its key (candidates for equal keys)
    "key_offsets": ("q", np.int64),  # its key is key_blob[key_offsets[i]:key_offsets[i + 1]] (one more entry)
}


@dataclass(frozen=True)
class UnitDone:
    """What a finished unit task sends back (and its record's summary): a few numbers and names per unit."""

    index: int
    shards: tuple         # its shard file names, in order
    shard_bytes: tuple    # their sizes
    shard_samples: tuple  # samples in each
    samples: int
    payload_bytes: int
    skipped: tuple        # ({"path", "reason"}, ...) in unit order
    field_names: tuple    # the unit's field names: bit i of its masks
    extensions: tuple     # the unit's primary field names: its ext ids

    @property
    def progress(self) -> tuple:
        """(samples handled, payload bytes), for executors that cannot relay live reports."""
        return self.samples + len(self.skipped), self.payload_bytes


class UnitColumns:
    """The per-sample columns of a unit being packed, with its field names and extensions."""

    def __init__(self):
        self.columns = {name: array.array(code) for name, (code, _) in RECORD_COLUMNS.items()}
        self.columns["key_offsets"].append(0)
        self.keys = bytearray()
        self.names, self.blocks, self.shard_starts = TaskNames(), 0, [0]

    @property
    def count(self) -> int:
        return len(self.columns["offset"])

    def add(self, shard: int, base: int, row: tuple) -> None:
        """One sample of `shard`, whose block begins at byte `base` of it; `row` as `ShardWriter.add` takes it."""
        offset, length, data_offset, nbytes, size, crc, kind, ext, label, mask, key = row
        while len(self.shard_starts) <= shard:
            self.shard_starts.append(self.count)
        key = key.encode("utf-8")
        values = (shard, self.blocks, base + offset, length, base + data_offset, nbytes, size, crc, kind, ext, label,
                  mask, stable_key_hash(key))
        for name, value in zip(RECORD_COLUMNS, values):
            self.columns[name].append(value)
        self.keys += key
        self.columns["key_offsets"].append(len(self.keys))

    def end_block(self) -> None:
        self.blocks += 1

    def shard_records(self, shard: int) -> tuple:
        """(offsets, lengths) of the records of `shard`, the last one begun (its sidecar's index)."""
        start = self.shard_starts[shard]
        return self.columns["offset"][start:], self.columns["length"][start:]

    def shard_samples(self) -> tuple:
        """Samples in each shard, in order."""
        return tuple(np.diff([*self.shard_starts, self.count]).tolist()) if self.count else ()


def record_path(partial: Path, unit: int) -> Path:
    """Where unit `unit` keeps its record: in the partial folder, named by its place among the units."""
    return Path(partial) / f"unit-{unit:06d}.rec"


def save_record(path, done: UnitDone, columns: UnitColumns) -> None:
    """Write a unit's record atomically (temporary name, fsync, rename)."""
    summary = json.dumps(dict(done.__dict__, skipped=list(done.skipped))).encode("utf-8")
    arrays = {name: np.asarray(columns.columns[name], dtype=dtype) for name, (_, dtype) in RECORD_COLUMNS.items()}
    with atomic_output(path) as f:
        np.savez(f, summary=np.frombuffer(summary, dtype=np.uint8),
                 key_blob=np.frombuffer(bytes(columns.keys), dtype=np.uint8), **arrays)


def load_done(path, output) -> UnitDone | None:
    """The UnitDone of a unit an earlier run finished (its record, and every shard at its recorded size), or None."""
    try:
        with np.load(path, allow_pickle=False) as record:
            summary = json.loads(record["summary"].tobytes())
        done = UnitDone(**{name: tuple(value) if isinstance(value, list) else value for name, value in summary.items()})
        sizes = [os.path.getsize(Path(output) / name) for name in done.shards]
        return done if sizes == list(done.shard_bytes) else None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return None


def load_column(path, name: str) -> np.ndarray:
    """One column of a unit's record (a name of RECORD_COLUMNS, or ``key_blob``)."""
    with np.load(path, allow_pickle=False) as record:
        return record[name]

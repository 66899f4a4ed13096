"""A packed unit's record: what its shards hold, saved before they are renamed into place.

A write task (unit_task.py) collects its samples' columns in `UnitColumns`, compactly (array
columns, the keys in one byte string: no object per sample; at most SPILL_ROWS samples in memory,
the rest appended to a spill file beside the record, so a task's memory does not grow with its
unit), and saves them as
``.corgi-partial/unit-<n>.rec``, an uncompressed .npz read back with ``allow_pickle=False``, with
a small JSON summary (`UnitDone`: shard names and sizes, counts, skips, and the unit's own field
names and extensions, which its masks and extension ids index), and a row per field of each sample
(FIELD_RECORD_COLUMNS: where it lies in its shard and its payload's CRC32C).  A shard under its final name
therefore always has its record, and a pack killed at any moment resumes from the units whose
record and shards exist (`load_done`); a killed task's spill file is a temporary file, removed when
the pack resumes or finishes.  The driver keeps the summaries and reads the columns back one at a
time to write the manifest (manifest_columns.py).
"""
from __future__ import annotations

import array
import json
import os
import secrets
import zipfile
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from corgi_io.packing.field_masks import TaskNames
from corgi_io.packing.keys import stable_key_hash
from corgi_io.storage.atomic import atomic_output, temp_name, writer_id

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
    "key_offsets": ("q", np.int64),  # its key is key_blob[key_offsets[i]:key_offsets[i + 1]] (the record has a
}                                    # leading 0: one more entry)
FIELD_RECORD_COLUMNS = {  # per field of each written sample, in unit then shard order (a sample's: popcount(fields))
    "field_id": ("B", np.uint8),        # bit of the unit's field masks: which field
    "field_framing": ("I", np.uint32),  # framing bytes before its payload (a tar header, a feature's map entry)
    "field_offset": ("q", np.int64),    # its payload's start in its shard
    "field_length": ("q", np.int64),
    "field_crc": ("I", np.uint32),      # CRC32C of its payload alone
}
READ_BYTES = 1 << 20  # bytes of a record column read at a time into the driver's joined column
SPILL_ROWS = 1 << 14  # samples whose columns a task holds in memory before it appends them to its spill file


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
    field_rows: int       # fields of its samples, all together: the rows of its FIELD_RECORD_COLUMNS

    @property
    def progress(self) -> tuple:
        """(samples handled, payload bytes), for executors that cannot relay live reports."""
        return self.samples + len(self.skipped), self.payload_bytes


class UnitColumns:
    """The per-sample columns of a unit being packed, with its field names and extensions.

    At most SPILL_ROWS samples' columns are held in memory: each full chunk is appended to a spill file beside
    the record (removed by `close`), so a task's memory does not grow with its unit, however many
    samples the plan puts in one shard; `save_record` streams the chunks into the record."""

    def __init__(self, record):
        record = Path(record)
        self.spill_path = record.with_name(temp_name(f"{record.name}.spill", f"{writer_id()}-{secrets.token_hex(4)}"))
        self.spill = None
        self.chunks = []  # per spilled chunk: {column: (byte offset in the spill file, byte count)}
        self.spilled, self.key_bytes, self.fields_spilled = 0, 0, 0  # samples, key bytes and fields spilled
        self.names, self.blocks, self.shard_starts = TaskNames(), 0, [0]
        self._new_chunk()

    def _new_chunk(self) -> None:
        self.columns = {name: array.array(code) for name, (code, _) in {**RECORD_COLUMNS, **FIELD_RECORD_COLUMNS}.items()}
        self.keys = bytearray()

    @property
    def count(self) -> int:
        return self.spilled + len(self.columns["offset"])

    @property
    def field_count(self) -> int:
        return self.fields_spilled + len(self.columns["field_offset"])

    def add(self, shard: int, base: int, row: tuple) -> None:
        """One sample of `shard`, whose block begins at byte `base` of it; `row` as `ShardWriter.add` takes it."""
        offset, length, data_offset, nbytes, size, crc, kind, ext, label, mask, key, fields = row
        while len(self.shard_starts) <= shard:
            self.shard_starts.append(self.count)
        key = key.encode("utf-8")
        self.keys += key
        values = (shard, self.blocks, base + offset, length, base + data_offset, nbytes, size, crc, kind, ext, label,
                  mask, stable_key_hash(key), self.key_bytes + len(self.keys))
        for name, value in zip(RECORD_COLUMNS, values):
            self.columns[name].append(value)
        self._add_fields(base + offset, fields)
        if len(self.columns["offset"]) >= SPILL_ROWS:
            self._spill_chunk()

    def _add_fields(self, start: int, fields) -> None:
        """The field rows of a sample whose record starts at byte `start` of its shard: (field id, framing bytes,
        payload offset in the record, payload length, payload CRC) each."""
        ids, framing, offsets, lengths, crcs = (self.columns[name] for name in FIELD_RECORD_COLUMNS)
        for field, frame, offset, length, crc in fields:
            ids.append(field)
            framing.append(frame)
            offsets.append(start + offset)
            lengths.append(length)
            crcs.append(crc)

    def _spill_chunk(self) -> None:
        """Append the chunk held in memory to the spill file and start an empty one."""
        if self.spill is None:
            self.spill = open(self.spill_path, "w+b")
        chunk = {}
        for name, part in [*self.columns.items(), ("key_blob", self.keys)]:
            chunk[name] = (self.spill.tell(), len(part) * part.itemsize if name != "key_blob" else len(part))
            self.spill.write(part)
        self.chunks.append(chunk)
        self.spilled, self.key_bytes, self.fields_spilled = self.count, self.key_bytes + len(self.keys), self.field_count
        self._new_chunk()

    def parts(self, name: str, start: int = 0):
        """Column `name` (of RECORD_COLUMNS or FIELD_RECORD_COLUMNS, or ``key_blob``) from row `start` on, as numpy
        arrays a chunk at a time: the spilled chunks read back, then the one in memory."""
        dtype, first = {**RECORD_COLUMNS, **FIELD_RECORD_COLUMNS}[name][1] if name != "key_blob" else np.uint8, 0
        if self.spill is not None:
            self.spill.flush()
        for chunk in self.chunks:
            offset, size = chunk[name]
            rows = size // np.dtype(dtype).itemsize
            if first + rows > start:
                data = os.pread(self.spill.fileno(), size, offset)
                yield np.frombuffer(data, dtype=dtype)[max(0, start - first):]
            first += rows
        held = self.keys if name == "key_blob" else self.columns[name]
        yield np.frombuffer(held, dtype=dtype)[max(0, start - first):] if len(held) else np.zeros(0, dtype)

    def end_block(self) -> None:
        self.blocks += 1

    def shard_records(self, shard: int) -> tuple:
        """(offsets, lengths) of the records of `shard`, the last one begun (its sidecar's index), as iterators."""
        start = self.shard_starts[shard]
        return tuple(chain.from_iterable(part.tolist() for part in self.parts(name, start))
                     for name in ("offset", "length"))

    def shard_samples(self) -> tuple:
        """Samples in each shard, in order."""
        return tuple(np.diff([*self.shard_starts, self.count]).tolist()) if self.count else ()

    def close(self) -> None:
        """Remove the spill file."""
        if self.spill is not None:
            self.spill.close()
            self.spill = None
        self.spill_path.unlink(missing_ok=True)


def record_path(partial: Path, unit: int) -> Path:
    """Where unit `unit` keeps its record: in the partial folder, named by its place among the units."""
    return Path(partial) / f"unit-{unit:06d}.rec"


def save_record(path, done: UnitDone, columns: UnitColumns) -> None:
    """Write a unit's record atomically (temporary name, fsync, rename): an .npz written a chunk at a time."""
    summary = json.dumps(dict(done.__dict__, skipped=list(done.skipped))).encode("utf-8")
    with atomic_output(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        _write_npy(archive, "summary", np.uint8, len(summary), [summary])
        _write_npy(archive, "key_blob", np.uint8, columns.key_bytes + len(columns.keys), columns.parts("key_blob"))
        for name, (_, dtype) in RECORD_COLUMNS.items():
            first = [np.zeros(1, dtype)] if name == "key_offsets" else []  # one more entry: key 0 starts at 0
            _write_npy(archive, name, dtype, columns.count + len(first), chain(first, columns.parts(name)))
        for name, (_, dtype) in FIELD_RECORD_COLUMNS.items():
            _write_npy(archive, name, dtype, columns.field_count, columns.parts(name))


def _write_npy(archive, name: str, dtype, count: int, parts) -> None:
    """Member ``<name>.npy`` of `archive` (as np.savez writes it): a 1-d array of `count` `dtype` from `parts`."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (count,)}
    with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
        np.lib.format.write_array_header_1_0(member, header)
        for part in parts:
            member.write(part)


def load_done(path, output, shard_size=None) -> UnitDone | None:
    """The UnitDone of a unit an earlier run finished (its record, and every shard at its recorded size), or None.
    `shard_size(name)`: a shard's size where it lives (default: its file's in the folder `output`)."""
    try:
        with np.load(path, allow_pickle=False) as record:
            summary = json.loads(record["summary"].tobytes())
        done = UnitDone(**{name: tuple(value) if isinstance(value, list) else value for name, value in summary.items()})
        sizes = [os.path.getsize(Path(output) / name) if shard_size is None else shard_size(name)
                 for name in done.shards]
        return done if sizes == list(done.shard_bytes) else None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return None


def load_column(path, name: str) -> np.ndarray:
    """One column of a unit's record (a name of RECORD_COLUMNS or FIELD_RECORD_COLUMNS, or ``key_blob``)."""
    with np.load(path, allow_pickle=False) as record:
        return record[name]


def read_column_into(path, name: str, out: np.ndarray) -> int:
    """Read column `name` of a unit's record into the start of `out`, READ_BYTES at a time (the driver never holds
    the column twice); returns its length.  A column that is not 1-d, of `out`'s dtype and no longer than `out`
    is refused (an OSError naming the record), never read past."""
    with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(member)
        if len(shape) != 1 or fortran_order or dtype != out.dtype or shape[0] > len(out):
            raise OSError(0, f"its {name} column is not at most {len(out)} {out.dtype}", str(path))
        view, at = memoryview(out[:shape[0]]).cast("B"), 0
        while at < len(view):
            chunk = member.read(min(READ_BYTES, len(view) - at))
            if not chunk:
                raise OSError(0, f"its {name} column is truncated", str(path))
            view[at:at + len(chunk)] = chunk
            at += len(chunk)
    return shape[0]

"""The manifest's columns and head parts, built last from the units' records, one column at a time.

Units are concatenated in their order: unit u's shards follow unit u - 1's, its samples and blocks
too.  Each unit names its own fields and extensions (the bits of its masks, its ext ids); the
pack's are those the driver knew before any task ran (a folder's walk), then the others in order
of first appearance (field_masks.pack_names), and each unit's columns are mapped onto them with a
small lookup (a few entries per unit, nothing per sample).  Every per-sample column is a
`LazyColumn`, built when `save_manifest` writes it and dropped right after, and the keys are
gathered last, so the driver holds one column, or the keys, at a time, however large the pack.
The per-field columns (each field's place and CRC, `fields`) are joined the same way, a column at a time;
each sample's run of them (`field_start`) follows from its mask's bits.
"""
from __future__ import annotations

import numpy as np

from corgi_io.packing.field_masks import check_field_count, pack_names, remap_ids, remap_masks
from corgi_io.packing.keys import equal_key_groups
from corgi_io.packing.records import FIELD_RECORD_COLUMNS, RECORD_COLUMNS, load_column, read_column_into

COPIED = ("bytes", "size", "offset", "length", "data_offset", "checksum", "kind", "label")


def block_columns(block_of: np.ndarray, shard, column) -> dict:
    """The manifest's block columns: a block is each run of samples with one value of `block_of` (a block id per
    sample in manifest order, dropped once its runs are found); `shard()` and `column(name)` give the samples'
    shard and record columns (offset, length, size), built one or two at a time."""
    first = np.flatnonzero(np.diff(block_of, prepend=-1) != 0)
    count = np.diff(np.append(first, len(block_of)))
    del block_of
    last = first + count - 1
    offset, length = column("offset"), column("length")
    blocks = dict(shard=shard()[first], offset=offset[first], first=first, count=count,
                  length=offset[last] + length[last] - offset[first])
    del offset, length
    size = column("size")
    blocks["size_sum"] = np.add.reduceat(size, first) if len(first) else np.zeros(0, np.int64)
    return blocks


class LazyColumn:
    """A column built when numpy first asks for it (``np.asarray`` calls ``__array__``)."""

    def __init__(self, build, built=None):
        self._build, self._built = build, built

    def __array__(self, dtype=None, copy=None):
        column = self._build()
        if self._built is not None:
            self._built()
        return column if dtype is None else column.astype(dtype, copy=False)


class PackColumns:
    """Head parts and columns of the pack made of `done` (the UnitDone of every unit, in order), whose records are
    at `records` (same order); `known` is (field names, primary field names) the driver knew, listed first."""

    def __init__(self, done: list, records: list, known: tuple = ((), ())):
        self.done, self.records = done, records
        self.field_names = check_field_count(pack_names(known[0], (unit.field_names for unit in done)))
        self.extensions = pack_names(known[1], (unit.extensions for unit in done))
        self.shard_base = np.cumsum([0, *(len(unit.shards) for unit in done)])
        self.samples_count = sum(unit.samples for unit in done)
        self.field_count = sum(unit.field_rows for unit in done)

    def shards(self) -> list:
        """The manifest head's shard entries: path, bytes, first sample, samples."""
        entries, first = [], 0
        for unit in self.done:
            for name, size, samples in zip(unit.shards, unit.shard_bytes, unit.shard_samples):
                entries.append({"path": name, "bytes": size, "first_sample": first, "samples": samples})
                first += samples
        return entries

    def labels(self) -> list:
        """Class names "0" .. the largest class id packed (one label column in memory at a time)."""
        largest = max((int(column.max()) for column in self._columns("label") if len(column)), default=-1)
        return [str(label) for label in range(largest + 1)]

    def max_fields(self) -> int:
        return max((int(np.bitwise_count(column).max()) for column in self._columns("fields") if len(column)),
                   default=1)

    def samples(self, built=None) -> dict:
        """{manifest column: LazyColumn}; `built()` is called as each one is built."""
        columns = {name: LazyColumn(lambda name=name: self._joined(name), built) for name in COPIED}
        columns.update(ext=LazyColumn(self._ext, built), fields=LazyColumn(self._fields, built),
                       shard=LazyColumn(self._shard, built))
        return columns

    def fields(self) -> dict:
        """{"start": each sample's first field row (n + 1 of them: sample i's fields are rows [start[i],
        start[i + 1])), then a LazyColumn per field column ("id" into `field_names`, "framing", "offset", "length",
        "crc")}, in manifest order."""
        columns = {"start": LazyColumn(self._field_start), "id": LazyColumn(self._field_ids)}
        columns.update({name: LazyColumn(lambda name=name: self._joined(f"field_{name}", self.field_count))
                        for name in ("framing", "offset", "length", "crc")})
        return columns

    def blocks(self) -> dict:
        """A block is a run of samples one write task closed as a block (it never spans two shards)."""
        return block_columns(self._joined_with("block", lambda column, unit, base: column + base, self._block_bases()),
                             self._shard, self._joined)

    def keys(self) -> tuple:
        """(uint8 blob, int64 offsets) of every sample's key, in manifest order, each filled a unit at a time into
        an array made once at its full size (never held twice)."""
        offsets, at = np.zeros(self.samples_count + 1, np.int64), 1
        for unit_offsets in self._columns("key_offsets"):
            offsets[at:at + len(unit_offsets) - 1] = unit_offsets[1:] + offsets[at - 1]
            at += len(unit_offsets) - 1
        blob, at = np.empty(int(offsets[-1]), np.uint8), 0
        for path in self.records:
            at += read_column_into(path, "key_blob", blob[at:])
        return blob, offsets

    def repeated_key(self) -> str | None:
        """A warning line naming a key that two samples share (and the units they come from), or None.

        One sort of the 8-byte key hashes; only samples whose hash repeats are compared by their keys."""
        key_hash = self._joined("key_hash")
        blob, offsets = self.keys()
        groups = equal_key_groups(key_hash, lambda indices: [bytes(blob[offsets[i]:offsets[i + 1]]).decode("utf-8")
                                                             for i in indices.tolist()])
        first = min(groups, key=lambda group: group[0], default=None)  # the earliest in pack order
        if first is None:
            return None
        units = np.searchsorted(np.cumsum([unit.samples for unit in self.done]), first[:2], side="right")
        key = bytes(blob[offsets[first[0]]:offsets[first[0] + 1]]).decode("utf-8")
        return (f"key {key!r} names two samples (of units {units[0]} and {units[1]}, in unit order); both are packed, "
                "but errors and skip records that name it are ambiguous")

    def _columns(self, name: str):
        for path in self.records:
            yield load_column(path, name)

    def _joined(self, name: str, rows: int | None = None) -> np.ndarray:
        return self._joined_with(name, lambda column, unit, base: column, [None] * len(self.done), rows)

    def _joined_with(self, name: str, convert, bases, rows: int | None = None) -> np.ndarray:
        """Record column `name` of every unit, `convert(column, unit, base)`, in unit order: filled a unit at a time
        into one array made at its full size (`rows`: the samples, unless a per-field column says otherwise)."""
        dtype = {**RECORD_COLUMNS, **FIELD_RECORD_COLUMNS}[name][1]
        joined, at = np.empty(self.samples_count if rows is None else rows, dtype), 0
        for column, unit, base in zip(self._columns(name), self.done, bases):
            joined[at:at + len(column)] = convert(column, unit, base)
            at += len(column)
        return joined

    def _ext(self) -> np.ndarray:
        return self._joined_with("ext", lambda column, unit, base: remap_ids(column, unit.extensions, self.extensions),
                                 [None] * len(self.done))

    def _fields(self) -> np.ndarray:
        return self._joined_with("fields", lambda column, unit, base: remap_masks(column, unit.field_names,
                                                                                  self.field_names),
                                 [None] * len(self.done))

    def _field_ids(self) -> np.ndarray:
        return self._joined_with("field_id", lambda column, unit, base: remap_ids(column, unit.field_names,
                                                                                  self.field_names),
                                 [None] * len(self.done), self.field_count)

    def _field_start(self) -> np.ndarray:
        """Each sample's first field row, and the field rows' count last: a sample has a row per bit of its mask."""
        start, at = np.zeros(self.samples_count + 1, np.int64), 0
        for masks in self._columns("fields"):
            start[at + 1:at + 1 + len(masks)] = start[at] + np.cumsum(np.bitwise_count(masks), dtype=np.int64)
            at += len(masks)
        return start

    def _shard(self) -> np.ndarray:
        column = self._joined_with("shard", lambda column, unit, base: column.astype(np.int64) + base,
                                   self.shard_base[:-1])
        return column.astype(np.int32)

    def _block_bases(self) -> list:
        """Each unit's first global block number (its block column's largest value + 1 per unit before it)."""
        bases, base = [], 0
        for column in self._columns("block"):
            bases.append(base)
            base += int(column[-1]) + 1 if len(column) else 0
        return bases

"""Row groups (version 5): each block's per-sample rows side by side in `columns/rows.bin`, so that one ranged
read brings every column of a block, and one multi-range request the blocks a rank reads next.

Why: a rank reads its blocks all over a pack.  With one `.npy` file per per-sample column, the first use of a
remote block cost a ranged request per column (a dozen), and a rank's start-up requests grew with the pack
(issue 31: 671-703 requests before the first batch at 10^6 samples).  Here a remote reader opens a pack with
the head and `columns/blocks.bin` (one GET each, their sizes known from the head: no HEAD), then fetches the
row groups of the blocks it will read next, up to FETCH_BYTES at a time, in one request (`Storage.read_ranges`).

Each group is stored zlib-compressed (level 1: 6.6x smaller on a pack of short texts, 0.1 ms to inflate 80 KB);
inflated, block b's group, its c samples [f, f + c), is (little-endian, no padding):
  each per-sample column of the schema, in schema order: its c values;
  key_offsets[f : f + c + 1], int64, absolute into the key blob;
  key_blob[key_offsets[f] : key_offsets[f + c]];
  version 6 on: field_start[f : f + c + 1], int64, absolute into the field rows, then each FIELD_COLUMNS column's
  rows [field_start[f], field_start[f + c]), in schema order.
`columns/blocks.bin` is the block table as an int64 matrix of one row per block: the block columns
(BLOCK_COLUMNS), then TABLE_EXTRA: the group's byte offset in rows.bin, its first key byte and (version 6 on) its
first field row.  A group's stored length is the gap to the next one; its inflated length follows from the table
(`group_lengths`), so the table is checked whole at open (`check_table`) and each group, inflated no further than
that length, by its length, key offsets and field starts when it arrives.  Local packs keep memory-mapping the `.npy` columns; `corgi verify` compares
the groups with them.  Writing them, and that comparison, is `row_group_writer.py`.
"""
from __future__ import annotations

import os
import threading
import zlib

import numpy as np

from corgi_io.errors import ManifestError
from corgi_io.manifest.ranged import LazyColumn, anonymous_array
from corgi_io.manifest.schema import (BLOCK_COLUMNS, BLOCKS_PATH, FIELD_COLUMNS, FIELD_RANGES_SINCE, ROWS_PATH,
                                      sample_columns)
from corgi_io.storage.base import RANGES_AT_ONCE

TABLE_EXTRA = ("rows", "keys", "fields")  # blocks.bin's columns after BLOCK_COLUMNS: group offset, first key byte,
TABLE_COLUMNS = (*BLOCK_COLUMNS, *TABLE_EXTRA)  # first field row (version 6 on): the current version's table
FIELD_ROW_BYTES = sum(np.dtype(t).itemsize for t in FIELD_COLUMNS.values())
FIELD_NAMES = tuple(f"field_{name}" for name in FIELD_COLUMNS)  # the columns of a row per field, in group order
FETCH_BYTES = 2 << 20  # row-group bytes one fetch brings at most, the blocks asked for plus those planned next
GAP_BYTES = 64 << 10   # where a request carries one range, groups this close share one: the gap costs less than a
                       # request (HTTP carries many ranges a request: no gap is read there)


def table_columns(version: int) -> tuple:
    """blocks.bin's columns in a pack of `version` (no first field row before version 6)."""
    return TABLE_COLUMNS if version >= FIELD_RANGES_SINCE else TABLE_COLUMNS[:-1]


def row_bytes(version: int) -> int:
    """Bytes one sample takes in a row group, its key offset and field start included (its key's bytes and its
    field rows not)."""
    return sum(np.dtype(t).itemsize for t in sample_columns(version).values()) + 8 + 8 * (version >= FIELD_RANGES_SINCE)


def group_lengths(table: dict, counts: dict, version: int) -> np.ndarray:
    """Each block's group length in bytes, from its sample count, first key byte and first field row (the next
    block's are their ends)."""
    keys = table["keys"]
    lengths = table["count"] * row_bytes(version) + 8 + (np.append(keys[1:], counts["key_bytes"]) - keys)
    if version >= FIELD_RANGES_SINCE:
        fields = table["fields"]
        lengths += 8 + (np.append(fields[1:], counts["fields"]) - fields) * FIELD_ROW_BYTES
    return lengths


# --- reading -------------------------------------------------------------------------------------------------

def read_table(storage, counts: dict, version: int, where: str) -> dict:
    """{name: column} of a remote pack's block table, read with one GET of BLOCKS_PATH and checked whole."""
    names = table_columns(version)
    expected = counts["blocks"] * len(names) * 8
    try:
        raw = storage.read_range(BLOCKS_PATH, 0, expected) if expected else b""
    except FileNotFoundError as exc:
        raise ManifestError(f"{storage.url(BLOCKS_PATH)}: cannot read ({exc.strerror or type(exc).__name__})") from None
    table = np.frombuffer(raw, dtype="<i8").reshape(-1, len(names))
    columns = {name: table[:, i].astype(BLOCK_COLUMNS.get(name, np.int64)) for i, name in enumerate(names)}
    check_table(columns, counts, version, storage.url(BLOCKS_PATH))
    return columns


def check_table(columns: dict, counts: dict, version: int, where: str) -> None:
    """Refuse a block table whose row groups do not lie end to end in rows.bin as their counts and keys say."""
    keys, rows = columns["keys"], columns["rows"]
    if len(keys) and (keys[0] != 0 or np.any(np.diff(keys) < 0) or keys[-1] > counts["key_bytes"]
                      or np.any(columns["count"] < 0)):
        raise ManifestError(f"{where}: the blocks' first key bytes do not index the key blob")
    fields = columns.get("fields", np.zeros(0, np.int64))
    if len(fields) and (fields[0] != 0 or np.any(np.diff(fields) < 0) or fields[-1] > counts["fields"]):
        raise ManifestError(f"{where}: the blocks' first field rows do not index the {counts['fields']} field rows")
    if len(rows) and (rows[0] != 0 or np.any(np.diff(rows) < 1) or rows[-1] >= counts["rows_bytes"]):
        raise ManifestError(f"{where}: the row groups do not lie end to end in {ROWS_PATH} "
                            f"({counts['rows_bytes']} bytes)")
    first, count = columns["first"], columns["count"]
    if int(count.sum()) != counts["samples"] or np.any(first != np.cumsum(count) - count):
        raise ManifestError(f"{where}: the blocks do not tile the head's {counts['samples']} samples")
    stored = np.diff(np.append(rows, counts["rows_bytes"]))
    too_big = np.flatnonzero(stored > deflate_bound(group_lengths(columns, counts, version)))
    if len(too_big):
        raise ManifestError(f"{where}: block {int(too_big[0])}'s row group takes {int(stored[too_big[0]])} bytes, "
                            "more than its rows can deflate to")


def deflate_bound(lengths: np.ndarray) -> np.ndarray:
    """The most bytes zlib can deflate each of `lengths` bytes to (zlib's compressBound, with room to spare)."""
    return lengths + lengths // 1000 + 64


class RowGroups:
    """A remote pack's per-sample rows, fetched a row group at a time and held in anonymous maps (memory: the
    groups fetched).  `columns()` are the `LazyColumn`s the Manifest hands out; `expect(blocks)` tells the
    blocks this process will read, in order, so that each fetch also brings the next ones (FETCH_BYTES)."""

    def __init__(self, storage, table: dict, counts: dict, version: int):
        self.storage, self.version, self.table = storage, version, table
        self.schema = sample_columns(version)
        self.lengths = group_lengths(table, counts, version)  # inflated
        self.stored = np.diff(np.append(table["rows"], counts["rows_bytes"]))  # compressed, in rows.bin
        self.key_ends = np.append(table["keys"][1:], counts["key_bytes"])
        samples = counts["samples"]
        self.arrays = {name: anonymous_array(np.dtype(t).newbyteorder("<"), samples) for name, t in self.schema.items()}
        self.arrays["key_offsets"] = anonymous_array("<i8", samples + 1)
        self.arrays["key_blob"] = anonymous_array(np.uint8, counts["key_bytes"])
        if version >= FIELD_RANGES_SINCE:
            self.field_ends = np.append(table["fields"][1:], counts["fields"])
            self.arrays["field_start"] = anonymous_array("<i8", samples + 1)
            self.arrays.update({f"field_{name}": anonymous_array(np.dtype(t).newbyteorder("<"), counts["fields"])
                                for name, t in FIELD_COLUMNS.items()})
        self.filled = np.zeros(len(table["first"]), dtype=bool)
        self.ahead, self.cursor = np.zeros(0, dtype=np.int64), 0
        self.lock = threading.Lock()
        self.shared = None  # a node's folder of fetched groups (`share`)
        self.failures, self.failure = 0, None  # fetches that failed, the last one's error: threads that waited for it

    def columns(self) -> dict:
        """{name: GroupedColumn} of every per-sample column, the key offsets, the key blob and (version 6 on) the
        field starts and per-field columns."""
        return {name: GroupedColumn(self, name, array) for name, array in self.arrays.items()}

    def share(self, folder: str) -> None:
        """Keep each fetched group in `folder` (a file per block, written atomically) and look there before asking
        the server: the ranks of a node with one cache folder fetch each group once.  A kept group is checked
        as a fetched one is; one that fails is fetched again."""
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:  # a full or read-only disk: the groups are not kept, the reads go on
            return
        self.shared = folder

    def expect(self, blocks) -> None:
        """The blocks this process reads next, in order (a worker's plan): later fetches bring them along."""
        with self.lock:
            self.ahead, self.cursor = np.asarray(blocks, dtype=np.int64).ravel(), 0

    def bounds(self, name: str) -> np.ndarray:
        """Each block's first item of column `name`: a key byte, a field row, or a sample."""
        return self.table["keys" if name == "key_blob" else "fields" if name in FIELD_NAMES else "first"]

    def blocks_of(self, name: str, start: int, stop: int) -> tuple:
        """Blocks [lo, hi) holding items [start, stop) of column `name` (key bytes for the key blob, field rows for
        a per-field column)."""
        if name in ("key_offsets", "field_start"):  # offset i + 1 ends sample i: it comes with sample i
            last = len(self.arrays[name]) - 2
            start, stop = min(start, last), max(min(stop - 1, last + 1), min(start, last) + 1)
        bounds = self.bounds(name)
        lo = max(int(np.searchsorted(bounds, start, "right")) - 1, 0)
        return lo, max(lo + 1, int(np.searchsorted(bounds, stop - 1, "right")))

    def ensure(self, lo: int, hi: int) -> None:
        """Fetch the groups of blocks [lo, hi) that are not here yet, with the expected next ones."""
        if self.filled[lo:hi].all():
            return
        failures = self.failures
        with self.lock:
            if self.failures != failures:  # the fetch this thread waited for failed, its retries spent: so does this
                raise self.failure
            needed = lo + np.flatnonzero(~self.filled[lo:hi])
            try:
                if len(needed) and self.stored.sum() <= FETCH_BYTES:  # a small pack's groups all come at once, and
                    self._fetch(np.flatnonzero(~self.filled))        # a later epoch's other blocks need no request
                elif len(needed):
                    self._fetch(np.union1d(needed, self._next_expected(int(self.stored[needed].sum()))))
            except Exception as exc:
                self.failures, self.failure = self.failures + 1, exc
                raise

    def _next_expected(self, taken: int) -> np.ndarray:
        """The next expected blocks not here yet, as many as FETCH_BYTES leaves room for after `taken` bytes, in
        no more ranges than one request carries (`ranges_per_request`), or than one round of concurrent requests
        (RANGES_AT_ONCE) where a request carries one: never a request per scattered block of a whole plan."""
        per_request = self.storage.ranges_per_request
        picked, most = [], per_request if per_request > 1 else RANGES_AT_ONCE  # one request, or one round of them
        while self.cursor < len(self.ahead) and taken < FETCH_BYTES:
            block = int(self.ahead[self.cursor])
            if 0 <= block < len(self.filled) and not self.filled[block]:
                if len(picked) >= most and len(self.spans(np.unique([*picked, block]))) > most:
                    break
                picked.append(block)
                taken += int(self.stored[block])
            self.cursor += 1
        return np.asarray(picked, dtype=np.int64)

    def spans(self, blocks: np.ndarray) -> list:
        """(first block, last block) of each byte range that reads the groups of `blocks` (sorted): adjacent groups,
        and, where a request carries one range, groups less than GAP_BYTES apart (the gap read too), share one."""
        starts, ends = self.table["rows"][blocks], self.table["rows"][blocks] + self.stored[blocks]
        gap = GAP_BYTES if self.storage.ranges_per_request == 1 else 0
        cuts = np.flatnonzero(starts[1:] - ends[:-1] > gap) + 1
        return [(int(run[0]), int(run[-1])) for run in np.split(blocks, cuts)] if len(blocks) else []

    def _fetch(self, blocks: np.ndarray) -> None:
        """Read the groups of `blocks` (sorted): those the node's folder keeps from there, the others in one
        `read_ranges`, one range per run of adjacent blocks (then kept in the folder)."""
        if self.shared is not None:
            blocks = blocks[[not self._place_kept(block) for block in blocks.tolist()]]
            if not len(blocks):
                return
        starts, spans = self.table["rows"], self.spans(blocks)
        ranges = [(int(starts[a]), int(starts[z] + self.stored[z] - starts[a])) for a, z in spans]
        wanted = set(blocks.tolist())
        for (a, z), data in zip(spans, self.storage.read_ranges(ROWS_PATH, ranges), strict=True):
            for block in (b for b in range(a, z + 1) if b in wanted):  # a gap's groups are read, not placed
                at = int(starts[block] - starts[a])
                stored = data[at:at + int(self.stored[block])]
                self._place(block, self.inflate(block, stored))
                self._keep(block, stored)
                self.filled[block] = True

    def _kept_path(self, block: int) -> str:
        return os.path.join(self.shared, f"{block}.rows")

    def _place_kept(self, block: int) -> bool:
        """Place block `block`'s group from the node's folder; False when it is not there or fails its checks."""
        try:
            with open(self._kept_path(block), "rb") as f:
                stored = f.read(int(self.stored[block]) + 1)
            if len(stored) != self.stored[block]:
                return False
            self._place(block, self.inflate(block, stored))
        except (OSError, ManifestError):
            return False
        self.filled[block] = True
        return True

    def _keep(self, block: int, stored: bytes) -> None:
        """Write a fetched group to the node's folder; a full or read-only disk only means it is not kept."""
        if self.shared is None:
            return
        from corgi_io.storage.atomic import atomic_output

        try:
            with atomic_output(self._kept_path(block), durable=False) as f:
                f.write(stored)
        except OSError:
            pass

    def inflate(self, block: int, data: bytes) -> bytes:
        """Block `block`'s group inflated, never past its length; ManifestError unless it is exactly that long."""
        expected = int(self.lengths[block])
        try:
            inflater = zlib.decompressobj()
            raw = inflater.decompress(data, expected + 1)
        except zlib.error as exc:
            raise ManifestError(f"{self.storage.url(ROWS_PATH)}: block {block}'s row group does not inflate "
                                f"({exc})") from None
        if len(raw) != expected or not inflater.eof or inflater.unused_data:
            raise ManifestError(f"{self.storage.url(ROWS_PATH)}: block {block}'s row group inflates to other than "
                                f"its {expected} bytes")
        return raw

    def _place(self, block: int, data) -> None:
        """Copy one group's rows into the column arrays, after its key offsets agree with the block table."""
        first, count = int(self.table["first"][block]), int(self.table["count"][block])
        at = 0
        for name, dtype in self.schema.items():
            size = count * np.dtype(dtype).itemsize
            self.arrays[name][first:first + count] = np.frombuffer(data[at:at + size], dtype=self.arrays[name].dtype)
            at += size
        keys = np.frombuffer(data[at:at + 8 * (count + 1)], dtype="<i8")
        if keys[0] != self.table["keys"][block] or keys[-1] != self.key_ends[block] or np.any(np.diff(keys) < 0):
            raise ManifestError(f"{self.storage.url(ROWS_PATH)}: block {block}'s key offsets disagree with "
                                f"{BLOCKS_PATH}")
        self.arrays["key_offsets"][first:first + count + 1] = keys
        at += 8 * (count + 1)
        self.arrays["key_blob"][keys[0]:keys[-1]] = np.frombuffer(data[at:at + int(keys[-1] - keys[0])], np.uint8)
        if self.version >= FIELD_RANGES_SINCE:
            self._place_fields(block, data, at + int(keys[-1] - keys[0]))

    def _place_fields(self, block: int, data, at: int) -> None:
        """Copy one group's field starts and field rows (from byte `at` of it), after its field starts agree with
        the block table."""
        first, count = int(self.table["first"][block]), int(self.table["count"][block])
        starts = np.frombuffer(data[at:at + 8 * (count + 1)], dtype="<i8")
        if (starts[0] != self.table["fields"][block] or starts[-1] != self.field_ends[block]
                or np.any(np.diff(starts) < 0)):
            raise ManifestError(f"{self.storage.url(ROWS_PATH)}: block {block}'s field starts disagree with "
                                f"{BLOCKS_PATH}")
        self.arrays["field_start"][first:first + count + 1] = starts
        at += 8 * (count + 1)
        rows = slice(int(starts[0]), int(starts[-1]))
        for name in FIELD_NAMES:
            column = self.arrays[name]
            size = (rows.stop - rows.start) * column.itemsize
            column[rows] = np.frombuffer(data[at:at + size], dtype=column.dtype)
            at += size


class GroupedColumn(LazyColumn):
    """One column of a `RowGroups`: reading rows fetches the row groups that hold them (every column's at once)."""

    def __init__(self, groups: RowGroups, name: str, array: np.ndarray):
        view = array.view()
        view.flags.writeable = False
        super().__init__(array.dtype, len(array), view)
        self._groups, self._name = groups, name

    def __repr__(self) -> str:
        return f"GroupedColumn({self._name}, {self._rows} x {self.dtype}, {int(self._groups.filled.sum())} groups read)"

    def fill(self, start: int = 0, stop: int | None = None) -> None:
        """Fetch the groups of rows [start, stop) (all by default) that are not here yet."""
        stop = self._rows if stop is None else min(stop, self._rows)
        if start < stop:
            self._groups.ensure(*self._groups.blocks_of(self._name, max(start, 0), stop))

    def complete(self, start: int = 0, stop: int | None = None) -> bool:
        """True when rows [start, stop) (all by default) are here."""
        stop = self._rows if stop is None else min(stop, self._rows)
        if start >= stop:
            return True
        lo, hi = self._groups.blocks_of(self._name, max(start, 0), stop)
        return bool(self._groups.filled[lo:hi].all())

    def _has(self, index: int) -> bool:
        return self.complete(index, index + 1)

    def _fill_rows(self, rows: np.ndarray) -> None:
        if len(rows):
            bounds = self._groups.bounds(self._name)
            if self._name in ("key_offsets", "field_start"):
                rows = np.minimum(rows, self._rows - 2)  # the last offset comes with the last sample
            for block in np.unique(np.maximum(np.searchsorted(bounds, rows, "right") - 1, 0)).tolist():
                self._groups.ensure(block, block + 1)


"""The samples in pack order, in two files that each task reads a slice of.

Once the plan is made, the driver writes one fixed-size row per sample in pack order (kind,
extension, label, byte count, field mask, where its names and key are) to ``<name>.rows``, and the
names (a sample's files joined by NUL, primary first) and keys to ``<name>.strings``.  A task for positions [first, stop) reads exactly its rows and
strings, on whatever machine it runs (the files are in OUTPUT/.corgi-partial, on the shared
file system), so a task is a few numbers however many samples its shard holds, and the driver
holds nothing per sample while shards are written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from corgi_io.packing.spool import decode, encode

ROW = np.dtype([("kind", "u1"), ("ext", "<u2"), ("label", "<i4"), ("nbytes", "<i8"), ("fields", "<u8"),
                ("strings", "<i8"), ("name_bytes", "<u4"), ("key_bytes", "<u4")])
WRITE_CHUNK = 1 << 13   # rows gathered and written at a time (bounds the Python objects alive)


@dataclass(frozen=True)
class Table:
    """Where a pack-order table lives."""

    rows: str
    strings: str


@dataclass(frozen=True)
class Rows:
    """The rows of positions [first, first + len(kind)): numpy columns plus names and keys."""

    first: int
    kind: np.ndarray
    ext: np.ndarray
    label: np.ndarray
    nbytes: np.ndarray
    names: list
    keys: list


def write_table(table: Table, corpus, order: np.ndarray) -> None:
    """Write `corpus` in `order` (walk index per position) as `table`, a chunk of rows at a time."""
    offset = 0
    with open(table.rows, "wb") as rows_file, open(table.strings, "wb") as strings_file:
        for start in range(0, len(order), WRITE_CHUNK):
            offset = _write_chunk(rows_file, strings_file, corpus, order[start:start + WRITE_CHUNK], offset)


def _write_chunk(rows_file, strings_file, corpus, files: np.ndarray, offset: int) -> int:
    """Write the rows of `files` (walk indices), their strings from byte `offset` on; returns the next offset."""
    names, keys = corpus.names_and_keys(files)
    names, keys = [encode(name) for name in names], [key.encode("utf-8") for key in keys]
    rows = np.empty(len(files), dtype=ROW)
    for field in ("kind", "ext", "label", "nbytes", "fields"):
        rows[field] = getattr(corpus, field)[files]
    rows["name_bytes"], rows["key_bytes"] = [len(n) for n in names], [len(k) for k in keys]
    sizes = rows["name_bytes"].astype(np.int64) + rows["key_bytes"]
    rows["strings"] = offset + np.cumsum(sizes) - sizes
    rows_file.write(rows.tobytes())
    strings_file.write(b"".join(part for pair in zip(names, keys) for part in pair))
    return offset + int(sizes.sum())


def read_rows(table: Table, first: int, stop: int) -> Rows:
    """The rows of positions [first, stop), names and keys decoded."""
    rows = _rows(table, first, stop)
    data, base = _strings(table, rows)
    starts, name_bytes, key_bytes = (rows["strings"] - base).tolist(), rows["name_bytes"].tolist(), rows["key_bytes"].tolist()
    names = [decode(data[a:a + n]) for a, n in zip(starts, name_bytes)]
    keys = [data[a + n:a + n + k].decode("utf-8") for a, n, k in zip(starts, name_bytes, key_bytes)]
    return Rows(first, rows["kind"], rows["ext"], rows["label"], rows["nbytes"], names, keys)


def _rows(table: Table, first: int, stop: int) -> np.ndarray:
    rows = np.fromfile(table.rows, dtype=ROW, count=stop - first, offset=first * ROW.itemsize)
    if len(rows) != stop - first:
        raise OSError(0, f"holds fewer rows than the plan ({len(rows)} of {stop - first} from row {first})", table.rows)
    return rows


def _strings(table: Table, rows: np.ndarray) -> tuple:
    """(the bytes of these rows' names and keys, the offset they start at in the strings file)."""
    if not len(rows):
        return b"", 0
    base = int(rows["strings"][0])
    size = int(rows["strings"][-1] + rows["name_bytes"][-1] + rows["key_bytes"][-1]) - base
    fd = os.open(table.strings, os.O_RDONLY)
    try:
        data = os.pread(fd, size, base)
    finally:
        os.close(fd)
    if len(data) != size:
        raise OSError(0, f"ends before byte {base + size}", table.strings)
    return data, base

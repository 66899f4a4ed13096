"""Writing a pack's row groups (`row_groups.py` has the layout and the reading), and `corgi verify`'s check that
the written groups equal the `.npy` columns they were made from.

The writer runs after every column is saved, in the packing process, and reads the columns back WRITE_ROWS rows
at a time with plain reads, so that it holds one step of rows whatever the pack's size.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from corgi_io.errors import ManifestError
from corgi_io.manifest.columns import HEADER_READ, parse_header
from corgi_io.manifest.row_groups import FIELD_NAMES, TABLE_COLUMNS, RowGroups, read_table
from corgi_io.manifest.schema import BLOCK_COLUMNS, BLOCKS_PATH, ROWS_PATH, column_path, field_columns, sample_columns

WRITE_ROWS = 1 << 16  # rows the writer reads from the .npy columns at once: bounds its memory


def write_row_groups(root, blocks: int) -> int:
    """Write ROWS_PATH then BLOCKS_PATH from the pack's saved `.npy` columns (`blocks` rows in the block columns),
    WRITE_ROWS rows at a time, each file atomically; return rows.bin's size.  Memory: one step of rows."""
    from corgi_io.storage.atomic import atomic_output

    root, names = Path(root), list(sample_columns())
    files = {name: _NpyRows(root, name) for name in [f"sample_{n}" for n in names] + [f"block_{n}" for n in BLOCK_COLUMNS]
             + ["key_offsets", "key_blob", *field_columns()]}
    table = np.zeros((blocks, len(TABLE_COLUMNS)), dtype="<i8")
    for i, name in enumerate(BLOCK_COLUMNS):
        table[:, i] = files[f"block_{name}"].read(0, blocks)
    first, count = table[:, TABLE_COLUMNS.index("first")], table[:, TABLE_COLUMNS.index("count")]
    with atomic_output(root / ROWS_PATH) as out:
        written = 0
        for lo, hi in _steps(first, count):
            written = _write_step(out, files, names, table, lo, hi, written)
    with atomic_output(root / BLOCKS_PATH) as out:
        out.write(table.tobytes())
    return written


def _steps(first: np.ndarray, count: np.ndarray):
    """(lo, hi) runs of blocks of about WRITE_ROWS rows (at least one block each)."""
    lo = 0
    while lo < len(first):
        hi = min(len(first), max(lo + 1, int(np.searchsorted(first, first[lo] + WRITE_ROWS))))
        yield lo, hi
        lo = hi


def _write_step(out, files: dict, names: list, table: np.ndarray, lo: int, hi: int, written: int) -> int:
    """Write the groups of blocks [lo, hi), fill their TABLE_EXTRA columns; return the bytes written after them."""
    first, count = table[:, TABLE_COLUMNS.index("first")], table[:, TABLE_COLUMNS.index("count")]
    start, stop = int(first[lo]), int(first[hi - 1] + count[hi - 1])
    rows = [files[f"sample_{n}"].read(start, stop) for n in names]
    key_offsets = files["key_offsets"].read(start, stop + 1)
    blob = files["key_blob"].read(int(key_offsets[0]), int(key_offsets[-1]))
    field_start = files["field_start"].read(start, stop + 1)
    fields = [files[name].read(int(field_start[0]), int(field_start[-1])) for name in FIELD_NAMES]
    for block in range(lo, hi):
        a, z = int(first[block]) - start, int(first[block] + count[block]) - start
        table[block, len(BLOCK_COLUMNS):] = written, key_offsets[a], field_start[a]
        written += out.write(zlib.compress(group_bytes(rows, (key_offsets, [blob]), a, z, (field_start, fields)), 1))
    return written


def group_bytes(rows: list, keys: tuple, a: int, z: int, fields: tuple | None) -> bytes:
    """The inflated row group of the samples at [a, z) of a step: `rows` its per-sample columns in schema order,
    `keys` its key offsets (one more than its rows) and [its keys' bytes from the first offset on], `fields`
    (version 6 on; None before) its field starts (one more than its rows) and its FIELD_COLUMNS rows from the first
    start on."""
    parts = [column[a:z].tobytes() for column in rows]
    for starts, items in [keys] + ([] if fields is None else [fields]):
        bounds = starts[a:z + 1]
        parts.append(bounds.tobytes())
        for column in items:
            parts.append(column[bounds[0] - starts[0]:bounds[-1] - starts[0]].tobytes())
    return b"".join(parts)


def check_against_columns(m, storage, rows_bytes: int) -> None:
    """`corgi verify` of a local version-5 pack: every stored row group, inflated, must equal the `.npy` columns
    that local readers map (a remote reader reads only the groups); ManifestError naming rows.bin and the block.
    Memory: one step of WRITE_ROWS rows."""
    counts = {"samples": m.num_samples, "blocks": len(m.blocks.first), "key_bytes": len(m.key_blob),
              "rows_bytes": rows_bytes, "fields": 0 if m.field_rows is None else len(m.field_rows)}
    groups = RowGroups(storage, read_table(storage, counts, m.version, storage.url(BLOCKS_PATH)), counts, m.version)
    columns = [m.samples.arrays[name] for name in groups.schema]
    for lo, hi in _steps(m.blocks.first, m.blocks.count):
        start, stop = int(m.blocks.first[lo]), int(m.blocks.first[hi - 1] + m.blocks.count[hi - 1])
        rows = [np.asarray(column[start:stop]).astype(column.dtype.newbyteorder("<")) for column in columns]
        key_offsets = np.asarray(m.key_offsets[start:stop + 1], dtype="<i8")
        keys = (key_offsets, [np.asarray(m.key_blob[int(key_offsets[0]):int(key_offsets[-1])])])
        fields = _field_rows(m, start, stop)
        where = int(groups.table["rows"][lo])
        data = storage.read_range(ROWS_PATH, where, int(groups.table["rows"][hi - 1] + groups.stored[hi - 1]) - where)
        for block in range(lo, hi):
            at = int(groups.table["rows"][block]) - where
            a, z = int(m.blocks.first[block]) - start, int(m.blocks.first[block] + m.blocks.count[block]) - start
            if groups.inflate(block, data[at:at + int(groups.stored[block])]) != group_bytes(rows, keys, a, z, fields):
                raise ManifestError(f"{storage.url(ROWS_PATH)}: block {block}'s row group disagrees with the "
                                    f"columns' rows {int(m.blocks.first[block])}..")


def _field_rows(m, start: int, stop: int) -> tuple | None:
    """(field starts, [FIELD_COLUMNS rows]) of samples [start, stop) of a Manifest, little-endian; None before
    version 6."""
    if m.field_start is None:
        return None
    starts = np.asarray(m.field_start[start:stop + 1], dtype="<i8")
    rows = slice(int(starts[0]), int(starts[-1]))
    return starts, [np.asarray(column[rows]).astype(column.dtype.newbyteorder("<")) for column in m.field_rows.arrays.values()]


class _NpyRows:
    """Rows of a saved `.npy` column, its header checked, read with plain reads (a map's touched pages would stay
    resident in the packing process)."""

    def __init__(self, root: Path, name: str):
        self.path = root / column_path(name)
        with open(self.path, "rb") as f:
            self.dtype, _, self.data_offset = parse_header(f.read(HEADER_READ), str(self.path))

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop)."""
        with open(self.path, "rb") as f:
            return np.fromfile(f, dtype=self.dtype, count=stop - start,
                               offset=self.data_offset + start * self.dtype.itemsize)

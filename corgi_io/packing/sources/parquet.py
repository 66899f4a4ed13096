"""Parquet tables as a SOURCE, one row group per unit (pyarrow, an optional dependency: the `parquet` extra).

`columns` maps names to columns: ``{"jpg": "image.bytes", "txt": "caption", "label": "label"}``.  A
name is a field name, or ``label`` (an integer column; null: unlabeled) or ``key`` (a string column,
obeying the key rule); a column is a top-level name or a dotted path into struct columns
(``image.bytes``).  Field columns hold binary (kept) or string (encoded UTF-8) values; a null value
leaves that field out of its row.  Without ``key`` a row's key is ``<file stem>/<row in the file>``.

`units` reads only each file's footer.  `read` reads one row group (`iter_batches` over that
group alone, only the mapped columns' leaves), in batches of `batch_rows` rows, never a whole
file; a row group whose mapped columns hold more than `max_row_group_bytes` (compressed) is skipped.  A row group whose schema lacks a mapped column, or holds it with another
type, is one line naming the file and row group (skipped; BadInput under `strict`); a row that
breaks a rule (a bad key or label, no field left) is one line naming its row.
"""
from __future__ import annotations

import posixpath
from contextlib import contextmanager

from corgi_io.errors import ArgumentError, BadInput, CorpusError
from corgi_io.packing.sources import Unit, check_field_mapping, open_binary, sample_from_values, skip_or_raise

SUFFIXES = (".parquet",)
BATCH_ROWS = 256
MAX_ROW_GROUP_BYTES = 1 << 31  # compressed bytes of a row group's mapped columns (untrusted files bound memory)


def units(path: str):
    """One unit per row group of the file at `path`, from its footer; CorpusError when it is not Parquet."""
    with _opened(path) as file:
        metadata = file.metadata
    first, found = 0, []
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        found.append(Unit("parquet", path, group, first, rows))
        first += rows
    return found


def read(unit: Unit, *, columns: dict, strict: bool = False, on_skip=None, batch_rows: int = BATCH_ROWS,
         max_row_group_bytes: int = MAX_ROW_GROUP_BYTES):
    """The samples of one row group, in row order (see the module docstring for what is skipped)."""
    check_field_mapping("columns", columns, "column name")
    if any("" in path.split(".") for path in columns.values()):
        raise ArgumentError(f"columns {columns!r}: a column path has an empty part")
    where = f"{unit.path}: row group {unit.part}"
    base = posixpath.basename(unit.path)
    stem = base[:-len(".parquet")] if base.lower().endswith(".parquet") else base
    leaves = sorted(set(columns.values()))
    with _opened(unit.path) as file:
        problem = (_schema_problem(file.schema_arrow, columns)
                   or _size_problem(file.metadata.row_group(unit.part), leaves, max_row_group_bytes))
        if problem is not None:
            return skip_or_raise(f"{where}: {problem}", strict, on_skip)
        row = unit.first_row
        for batch in file.iter_batches(batch_size=batch_rows, row_groups=[unit.part], columns=leaves):
            values = {name: _values(batch, path) for name, path in columns.items()}
            for i in range(batch.num_rows):
                try:
                    yield sample_from_values({name: column[i] for name, column in values.items()}, f"{stem}/{row}")
                except BadInput as exc:
                    skip_or_raise(f"{where}: row {row}: {exc}", strict, on_skip)
                row += 1


@contextmanager
def _opened(path: str):
    """A pyarrow ParquetFile over a local path or fsspec URL, closed after; CorpusError when it is not Parquet."""
    import pyarrow
    import pyarrow.parquet as pq

    with open_binary(path) as raw:
        try:
            file = pq.ParquetFile(raw)
        except (pyarrow.ArrowException, OSError) as exc:
            raise CorpusError(f"{path}: not a Parquet file ({exc})") from None
        yield file


def _schema_problem(schema, columns: dict) -> str | None:
    """What in `schema` does not fit `columns` (a missing column, another type), or None."""
    from pyarrow import types

    wanted = {"label": (types.is_integer, "an integer"), "key": (_is_text, "a string")}
    for name, path in columns.items():
        kind = _column_type(schema, path)
        if kind is None:
            return f"has no column {path!r} (for {name!r})"
        check, what = wanted.get(name, (_is_bytes_or_text, "binary or string"))
        if not check(kind):
            return f"column {path!r} is {kind}, not {what} (for {name!r})"
    return None


def _size_problem(group, leaves: list, limit: int) -> str | None:
    """Whether the column chunks that `leaves` select in row group metadata `group` hold more compressed
    bytes than `limit` (pyarrow holds a column chunk whole while it decodes it), or None."""
    paths = (group.column(j).path_in_schema for j in range(group.num_columns))
    size = sum(group.column(j).total_compressed_size for j, path in enumerate(paths)
               if any(path == leaf or path.startswith(leaf + ".") for leaf in leaves))
    if size > limit:
        return f"its mapped columns hold {size} compressed bytes, above max_row_group_bytes={limit}"
    return None


def _column_type(schema, path: str):
    """The arrow type at a dotted `path` of `schema`, through struct columns; None when absent."""
    from pyarrow import types

    head, *rest = path.split(".")
    if schema.get_field_index(head) < 0:
        return None
    kind = schema.field(head).type
    for part in rest:
        if not types.is_struct(kind) or kind.get_field_index(part) < 0:
            return None
        kind = kind.field(part).type
    return kind


def _is_text(kind) -> bool:
    """Whether an arrow type holds text (a key, or a field to encode UTF-8)."""
    from pyarrow import types

    return types.is_string(kind) or types.is_large_string(kind)


def _is_bytes_or_text(kind) -> bool:
    """Whether an arrow type can hold a field: binary of any width, or text."""
    from pyarrow import types

    return _is_text(kind) or types.is_binary(kind) or types.is_large_binary(kind) or types.is_fixed_size_binary(kind)


def _values(batch, path: str) -> list:
    """The Python values of the column at a dotted `path` of a record batch (None under a null struct)."""
    import pyarrow.compute as pc

    head, *rest = path.split(".")
    array = batch.column(head)
    for part in rest:
        array = pc.struct_field(array, part)
    return array.to_pylist()

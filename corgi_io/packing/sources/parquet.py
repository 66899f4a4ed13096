"""Parquet tables as a SOURCE, one row group per unit (pyarrow, an optional dependency: the `parquet` extra).

`columns` maps names to columns: ``{"jpg": "image.bytes", "txt": "caption", "label": "label"}``.  A
name is a field name, or ``label`` (an integer column; null: unlabeled) or ``key`` (a string column,
obeying the key rule); a column is a top-level name or a dotted path into struct columns
(``image.bytes``).  Field columns hold binary (kept) or string (encoded UTF-8) values; a null value
leaves that field out of its row.  Without ``key`` a row's key is ``<file stem>/<row in the file>``.

`units` reads only each file's footer.  `read` reads one row group (`iter_batches` over that
group alone, only the mapped columns' leaves), never a whole file, in batches of at most
`batch_rows` rows and of at most `BATCH_BYTES` decoded (see `_batch_rows`); pyarrow reads each
column chunk through a `READ_BUFFER` buffer, not whole.  Memory is bounded before anything is
decompressed, and the footer's sizes are not trusted: pyarrow decompresses a page whole, into as many
bytes as the page's own header says, so the page headers (`parquet_pages`) of every mapped column
chunk are read first, and batches are sized from them.  A dictionary page counts once in the pages
held, and once in every row of a batch: pyarrow copies a value into each row that points to it (a
2.5 KB file of one 64 MiB value and 256 rows pointing to it made a 16 GiB batch).

A row group is skipped when its mapped columns hold more than `max_row_group_bytes` compressed; when a
page's values average more than `max_cell_bytes` (one at least is a cell the pack would refuse: a 49 KB
file of one 1.5 GiB cell of zeros is one page; so is a dictionary page of one value above the limit, but
not one larger than the limit that holds many smaller values: its size only shrinks batches, down to one
row, as one row holds at most one value of it); or when the pages read at once (each mapped column's
dictionary page and largest data page) take more than `max_row_group_bytes` uncompressed, whatever the
values a header claims. These, and a row group whose schema lacks a mapped column or holds it with
another type, are one line naming the file, row group and column, and the page's byte offset where a
page is the cause (skipped; BadInput under `strict`); a row that breaks a rule (a bad key or label, no
field left) is one line naming its row.
"""
from __future__ import annotations

import posixpath
from contextlib import contextmanager
from typing import NamedTuple

from corgi_io.errors import ArgumentError, BadInput, CorpusError
from corgi_io.packing.regular_files import DEFAULT_MAX_SAMPLE_BYTES
from corgi_io.packing.sources.unit_list import Unit
from corgi_io.packing.sources.parquet_pages import pages
from corgi_io.packing.sources.values import check_field_mapping, open_binary, sample_from_values, skip_or_raise

SUFFIXES = (".parquet",)
BATCH_ROWS = 256
BATCH_BYTES = 64 << 20  # the most bytes of the mapped columns a batch holds decoded (by the page headers)
READ_BUFFER = 1 << 20  # pyarrow reads a column chunk through a buffer this large, not whole
MAX_ROW_GROUP_BYTES = 1 << 31  # a row group's mapped columns compressed, and their pages held at once uncompressed
CELL_OVERHEAD = 64  # bytes a page may spend on each value beside the value (its length, its levels)


def units(path: str):
    """One unit per row group of the file at `path`, from its footer; CorpusError when it is not Parquet."""
    with _opened(path) as (file, _):
        metadata = file.metadata
    first, found = 0, []
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        found.append(Unit("parquet", path, group, first, rows))
        first += rows
    return found


def read(unit: Unit, *, columns: dict, strict: bool = False, on_skip=None, batch_rows: int = BATCH_ROWS,
         max_row_group_bytes: int = MAX_ROW_GROUP_BYTES, max_cell_bytes: int = DEFAULT_MAX_SAMPLE_BYTES):
    """The samples of one row group, in row order (see the module docstring for what is skipped)."""
    check_field_mapping("columns", columns, "column name")
    if any("" in path.split(".") for path in columns.values()):
        raise ArgumentError(f"columns {columns!r}: a column path has an empty part")
    where = f"{unit.path}: row group {unit.part}"
    base = posixpath.basename(unit.path)
    stem = base[:-len(".parquet")] if base.lower().endswith(".parquet") else base
    leaves = sorted(set(columns.values()))
    with _opened(unit.path) as (file, raw):
        group = file.metadata.row_group(unit.part)
        chunks = _mapped_chunks(group, leaves)
        problem, sizes = _schema_problem(file.schema_arrow, columns) or _size_problem(chunks, max_row_group_bytes), []
        if problem is None:
            problem, sizes = _page_problem(raw, chunks, max_cell_bytes, max_row_group_bytes)
        if problem is not None:
            return skip_or_raise(f"{where}: {problem}", strict, on_skip)
        row, size = unit.first_row, _batch_rows(sizes, batch_rows)
        for batch in file.iter_batches(batch_size=size, row_groups=[unit.part], columns=leaves):
            values = {name: _values(batch, path) for name, path in columns.items()}
            for i in range(batch.num_rows):
                try:
                    yield sample_from_values({name: column[i] for name, column in values.items()}, f"{stem}/{row}")
                except BadInput as exc:
                    skip_or_raise(f"{where}: row {row}: {exc}", strict, on_skip)
                row += 1


@contextmanager
def _opened(path: str):
    """(a pyarrow ParquetFile, the binary file under it) over a local path or fsspec URL, closed after; CorpusError
    when it is not Parquet."""
    import pyarrow
    import pyarrow.parquet as pq

    with open_binary(path) as raw:
        try:
            file = pq.ParquetFile(raw, buffer_size=READ_BUFFER)
        except (pyarrow.ArrowException, OSError) as exc:
            raise CorpusError(f"{path}: not a Parquet file ({exc})") from None
        yield file, raw


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


def _mapped_chunks(group, leaves: list) -> list:
    """The column chunk metadata of row group metadata `group` that `leaves` select (a struct path selects its
    leaves)."""
    chunks = (group.column(j) for j in range(group.num_columns))
    return [chunk for chunk in chunks
            if any(chunk.path_in_schema == leaf or chunk.path_in_schema.startswith(leaf + ".") for leaf in leaves)]


def _size_problem(chunks: list, limit: int) -> str | None:
    """Whether column chunks `chunks` hold more compressed bytes than `limit`, or None."""
    size = sum(chunk.total_compressed_size for chunk in chunks)
    if size > limit:
        return f"its mapped columns hold {size} compressed bytes, above max_row_group_bytes={limit}"
    return None


def _page_problem(raw, chunks: list, most: int, budget: int) -> tuple:
    """(what in the page headers of column chunks `chunks` (in binary file `raw`) would take more memory to
    decompress than `budget` bytes, or surely holds a cell above `most` bytes (see the module), or None; the
    _Sizes of the chunks walked).  Every chunk is walked, compressed or not: its header sizes batches."""
    held, found = 0, []  # uncompressed bytes of the pages of the chunks before, read beside this chunk's
    for chunk in chunks:
        where = f"column {chunk.path_in_schema!r}"
        try:
            sizes = _chunk_pages(raw, chunk, most)
        except ValueError as exc:
            return f"{where}: {exc}", found
        held += sizes.dictionary + sizes.widest
        if held > budget:
            return (f"{where}: the page at byte offset {sizes.largest.offset} is {sizes.largest.uncompressed:,} "
                    f"bytes uncompressed, {held:,} with the pages read beside it, above "
                    f"max_row_group_bytes={budget}; not decompressed"), found
        found.append(sizes)
    return None, found


class _Sizes(NamedTuple):
    """What the page headers of one column chunk say it takes, in bytes."""

    largest: object   # its largest page (a parquet_pages.Page)
    dictionary: int   # its dictionary page uncompressed: held while the chunk is read, and the most one row's
    #                   dictionary-encoded value can take (pyarrow copies the value into every row that points to it)
    widest: int       # its largest data page uncompressed: held while it is read, and the most one row's value takes
    data: int         # all its data pages uncompressed (an uncompressed page: its stored bytes, if more)


def _chunk_pages(raw, chunk, most: int) -> _Sizes:
    """The _Sizes of column chunk `chunk`, from its page headers; ValueError for a header that does not parse, or
    naming a page whose values average above `most` bytes."""
    starts = [offset for offset in (chunk.dictionary_page_offset, chunk.data_page_offset) if offset]
    largest, dictionary, widest, data = None, 0, 0, 0
    for page in pages(raw, min(starts, default=0), chunk.total_compressed_size):
        if page.uncompressed > max(page.values, 1) * (most + CELL_OVERHEAD):
            raise ValueError(f"the page at byte offset {page.offset} holds {page.values} value(s) in "
                             f"{page.uncompressed:,} bytes, one at least above the limit of {most:,} "
                             f"(--max-sample-bytes); not decompressed")
        if largest is None or page.uncompressed > largest.uncompressed:
            largest = page
        if page.dictionary:
            dictionary += page.uncompressed
        else:
            widest = max(widest, page.uncompressed, page.stored)
            data += max(page.uncompressed, page.stored)
    return _Sizes(largest, dictionary, widest, data)


def _batch_rows(sizes: list, most: int) -> int:
    """Rows a batch of the row group reads: at most `most`, and as many as surely take at most BATCH_BYTES of the
    mapped columns by their page headers (at least one row).  A value lies in one data page, so r rows of a chunk
    take at most r * the larger of its largest data page and its dictionary (a dictionary value is copied into
    each row that points to it), and at most all its data pages + r * its dictionary; the footer's sizes,
    untrusted, are not used (see the module)."""
    def most_bytes(rows: int) -> int:
        return sum(min(rows * max(chunk.widest, chunk.dictionary), chunk.data + rows * chunk.dictionary)
                   for chunk in sizes)

    low, high = 1, max(most, 1)
    while low < high:  # the most rows within BATCH_BYTES: most_bytes grows with rows
        middle = (low + high + 1) // 2
        low, high = (middle, high) if most_bytes(middle) <= BATCH_BYTES else (low, middle - 1)
    return low


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

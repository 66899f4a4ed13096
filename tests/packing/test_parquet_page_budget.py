"""A Parquet page is bounded by what its own header says, not by the footer (issue 28 review): pyarrow reads a
column chunk by its compressed size and decompresses each page into as many bytes as the page's header says, so
a footer that understates a chunk, or a header that claims many values, must not let a bomb through."""
from __future__ import annotations

import re

import pytest

from corgi_io.packing.sources.unit_list import Unit, read_unit
from helpers.parquet_bombs import bomb

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def skips(path, rows: int, **limits) -> list:
    """The skip messages of reading row group 0 of the Parquet file at `path`; no sample is read."""
    messages = []
    assert list(read_unit(Unit("parquet", str(path), 0, 0, rows), columns={"txt": "txt"}, on_skip=messages.append,
                          **limits)) == []
    return messages


def test_a_footer_that_understates_a_chunk_does_not_spare_its_page_headers(tmp_path):
    """Before: the footer's 1 KiB skipped the walk, and the 8 MiB cell was decompressed and read."""
    path = bomb(tmp_path / "bomb.parquet", 8 << 20, claimed=1024)
    (message,) = skips(path, 1, max_cell_bytes=1 << 20)
    assert re.fullmatch(f"skipped {re.escape(path)}: row group 0: column 'txt': the page at byte offset 4 holds 1 "
                        r"value\(s\) in 8,388,6\d\d bytes, one at least above the limit of 1,048,576 "
                        r"\(--max-sample-bytes\); not decompressed", message)


def test_a_page_claiming_many_values_is_bounded_by_the_row_group_budget(tmp_path):
    """One 8 MiB cell among 99,999 nulls in one page averages 84 bytes a value: before, only a 2 GiB page was
    refused, whatever the budget."""
    path = tmp_path / "nulls.parquet"
    column = pa.array([bytes(8 << 20)] + [None] * 99_999, pa.binary())
    pq.write_table(pa.table({"txt": column}), path, compression="zstd", use_dictionary=False,
                   write_batch_size=100_000)
    (message,) = skips(path, 100_000, max_cell_bytes=1 << 20, max_row_group_bytes=4 << 20)
    assert re.fullmatch(f"skipped {re.escape(str(path))}: row group 0: column 'txt': the page at byte offset 4 is "
                        r"8,3\d\d,\d\d\d bytes uncompressed, 8,3\d\d,\d\d\d with the pages read beside it, above "
                        r"max_row_group_bytes=4194304; not decompressed", message)


def test_the_pages_of_the_mapped_columns_share_the_budget(tmp_path):
    """Each column's 3 MB page fits a 5 MiB budget alone; read together they do not."""
    path = tmp_path / "two.parquet"
    pq.write_table(pa.table({"a": [bytes(3000)] * 1000, "b": [bytes(3000)] * 1000}), path, use_dictionary=False)
    read = {"columns": {"txt": "a", "txt2": "b"}, "max_row_group_bytes": 5 << 20}
    assert len(list(read_unit(Unit("parquet", str(path), 0, 0, 1000), **{**read, "columns": {"txt": "a"}}))) == 1000
    messages = []
    assert list(read_unit(Unit("parquet", str(path), 0, 0, 1000), on_skip=messages.append, **read)) == []
    (message,) = messages
    assert re.search(r"row group 0: column 'b': the page at byte offset \d+ is 3,00\d,\d\d\d bytes uncompressed, "
                     r"6,0\d\d,\d\d\d with the pages read beside it", message)

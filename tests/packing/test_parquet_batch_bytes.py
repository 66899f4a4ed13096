"""A batch of a Parquet row group is sized by its page headers, not by the footer (issue 28 review): a footer
that understates the chunk, or one dictionary value that every row points to, must not make a batch of
hundreds of large rows.  Each read runs in a subprocess with BATCH_BYTES at 1 MiB: its peak RSS is measured."""
from __future__ import annotations

import pytest

from helpers.parquet_bombs import read_growth, understate

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
BATCH = 1 << 20


def test_a_footer_understating_many_large_pages_does_not_make_one_batch_of_them(tmp_path):
    """128 cells of 512 KiB of zeros, one a page, zstd; the footer says 1000 bytes.  Before: one batch of 128 rows,
    the peak RSS grew by 79 MiB; now batches of 2 rows, too little to see."""
    path = tmp_path / "pages.parquet"
    pq.write_table(pa.table({"txt": [bytes(512 << 10)] * 128}), path, compression="zstd", use_dictionary=False,
                   write_batch_size=1, data_page_size=1)
    understate(path, 1000)
    growth, count, skips = read_growth(path, 128, BATCH, max_cell_bytes=1 << 20)
    assert (count, skips) == (128, "") and growth < 24 << 20


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_one_dictionary_value_that_every_row_points_to_is_counted_in_every_row(tmp_path, compression):
    """One 512 KiB dictionary value, 256 rows pointing to it: the data page is a few bytes.  Before: one batch of
    256 rows, each a copy of the value: the peak RSS grew by 271 MiB; now batches of 1 row, too little to see."""
    path = tmp_path / "dictionary.parquet"
    column = pa.DictionaryArray.from_arrays(pa.array([0] * 256, pa.int32()), pa.array([bytes(512 << 10)]))
    pq.write_table(pa.table({"txt": column}), path, compression=compression, store_schema=False)
    assert pq.ParquetFile(path).schema_arrow.field("txt").type == pa.binary()
    growth, count, skips = read_growth(path, 256, BATCH, max_cell_bytes=1 << 20)
    assert (count, skips) == (256, "") and growth < 24 << 20

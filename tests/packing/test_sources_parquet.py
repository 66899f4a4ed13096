"""packing.sources.parquet: Parquet tables read as a SOURCE, one row group per unit, schema checked per row group."""
from __future__ import annotations

import re

import pytest

from corgi_io.errors import ArgumentError, BadInput, CorpusError
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit, list_units, read_unit

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

NESTED = {"jpg": "image.bytes", "txt": "caption", "label": "label"}


def write_nested(path):
    """Three rows in two row groups: `image` a struct of bytes and path, a string caption, an int label."""
    table = pa.table({
        "image": [{"bytes": b"\xff\xd80", "path": "a.jpg"}, None, {"bytes": b"\xff\xd82", "path": "c.jpg"}],
        "caption": ["one", "twö", None],
        "label": pa.array([1, None, 3], pa.int16()),
    })
    pq.write_table(table, path, row_group_size=2)
    return str(path)


def read(unit, columns=NESTED, **options):
    """(samples, skip messages) of one unit."""
    messages = []
    samples = list(read_unit(unit, columns=columns, on_skip=messages.append, **options))
    return samples, messages


def test_units_are_row_groups_from_the_footer(tmp_path):
    path = write_nested(tmp_path / "t.parquet")
    assert list_units(str(tmp_path)) == [Unit("parquet", path, 0, 0, 2), Unit("parquet", path, 1, 2, 1)]


def test_each_row_group_gives_exactly_its_rows(tmp_path):
    path = write_nested(tmp_path / "t.parquet")
    first, second = list_units(path)
    assert read(first) == ([PackSample("t/0", 1, {"jpg": b"\xff\xd80", "txt": b"one"}),
                            PackSample("t/1", -1, {"txt": "twö".encode()})], [])
    assert read(second) == ([PackSample("t/2", 3, {"jpg": b"\xff\xd82"})], [])
    assert read(first, batch_rows=1) == read(first)


def test_a_flat_table_with_a_key_column(tmp_path):
    path = tmp_path / "flat.parquet"
    pq.write_table(pa.table({"name": ["cats/a", "../b", "cats/c"], "png": [b"A", b"B", b"C"],
                             "cls": pa.array([0, 1, -5], pa.int64())}), path)
    (unit,) = list_units(str(path))
    samples, messages = read(unit, {"png": "png", "key": "name", "label": "cls"})
    assert samples == [PackSample("cats/a", 0, {"png": b"A"})]
    assert messages == [f"skipped {path}: row group 0: row 1: key '../b' has a '..' component",
                        f"skipped {path}: row group 0: row 2: label -5 is not an integer from 0 to 2147483647"]


@pytest.mark.parametrize("columns, problem", [
    ({"jpg": "image.bytes", "txt": "caption"}, "has no column 'image.bytes' (for 'jpg')"),
    ({"txt": "caption"}, "column 'caption' is int64, not binary or string (for 'txt')"),
    ({"txt": "text", "label": "text"}, "column 'text' is string, not an integer (for 'label')"),
    ({"txt": "text", "key": "caption"}, "column 'caption' is int64, not a string (for 'key')"),
    ({"txt": "text.inner"}, "has no column 'text.inner' (for 'txt')"),
])
def test_a_row_group_of_another_schema_is_one_line(tmp_path, columns, problem):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"caption": [1, 2, 3], "text": ["a", "b", "c"]}), path, row_group_size=2)
    for unit in list_units(str(path)):
        message = f"{path}: row group {unit.part}: {problem}"
        assert read(unit, columns) == ([], [f"skipped {message}"])
        with pytest.raises(BadInput, match="^" + re.escape(message) + "$"):
            read(unit, columns, strict=True)


def test_a_row_with_no_field_left_is_skipped(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"caption": ["a", None]}), path)
    (unit,) = list_units(str(path))
    assert read(unit, {"txt": "caption"}) == ([PackSample("t/0", -1, {"txt": b"a"})],
                                              [f"skipped {path}: row group 0: row 1: sample 't/1' has no field"])


def test_not_parquet_and_bad_columns(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CorpusError, match=f"^{re.escape(str(tmp_path / 't.parquet'))}: not a Parquet file"):
        list_units(str(tmp_path / "t.parquet"))
    path = write_nested(tmp_path / "n.parquet")
    for bad in ({}, {"key": "caption"}, {"JPG": "caption"}, {"jpg": "image..bytes"}):
        with pytest.raises(ArgumentError):
            read(list_units(path)[0], bad)


def test_a_row_group_above_the_size_limit_is_one_line(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"png": [bytes(range(256)) * 40] * 4, "small": ["x"] * 4}), path, compression="none")
    (unit,) = list_units(str(path))
    samples, messages = read(unit, {"png": "png"}, max_row_group_bytes=10_000)
    assert samples == []
    assert re.fullmatch(rf"skipped {re.escape(str(path))}: row group 0: its mapped columns hold \d+ compressed "
                        r"bytes, above max_row_group_bytes=10000", messages[0])
    assert len(read(unit, {"txt": "small"}, max_row_group_bytes=10_000)[0]) == 4  # only the mapped columns count

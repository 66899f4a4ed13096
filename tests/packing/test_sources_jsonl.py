"""packing.sources.jsonl: JSONL files of inline values read as a SOURCE (chosen with from_="jsonl")."""
from __future__ import annotations

import fsspec
import pytest

from corgi_io.errors import ArgumentError, BadInput
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.forms import detect
from corgi_io.packing.sources.unit_list import Unit, list_units, read_unit

COLUMNS = {"txt": "caption", "json": "meta.raw", "label": "label"}


def read(path, columns=COLUMNS, **options):
    """(samples, skip messages) of one file."""
    messages = []
    samples = list(read_unit(Unit("jsonl", str(path)), columns=columns, on_skip=messages.append, **options))
    return samples, messages


def test_inline_values_are_samples_and_jsonl_is_a_listing_unless_chosen(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"caption": "a cat", "meta": {"raw": "{}"}, "label": 3}\n\n'
                    '{"caption": "ünï", "label": null}\n', encoding="utf-8")
    assert detect(str(path)) == "listing"
    assert list_units(str(path), from_="jsonl") == [Unit("jsonl", str(path))]
    assert list_units(str(tmp_path), from_="jsonl") == [Unit("jsonl", str(path))]
    assert read(path) == ([PackSample("rows/1", 3, {"txt": b"a cat", "json": b"{}"}),
                           PackSample("rows/3", -1, {"txt": "ünï".encode()})], [])


def test_a_bad_line_is_one_line_naming_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"caption": "ok", "id": "a"}\nnot json\n[1, 2]\n{"caption": 5}\n{"caption": "x", "id": "../b"}\n'
                    '{"caption": "x", "label": -1}\n{"other": 1}\n' + '{"caption": "' + "y" * 200 + '"}\n'
                    '{"caption": "last", "id": "c"}\n')
    samples, messages = read(path, {"txt": "caption", "key": "id", "label": "label"}, max_line_bytes=100)
    assert samples == [PackSample("a", -1, {"txt": b"ok"}), PackSample("c", -1, {"txt": b"last"})]
    assert [message.split(": ", 2)[1:] for message in messages] == [
        ["line 2", "not JSON (Expecting value: line 1 column 1 (char 0))"],
        ["line 3", "holds list, not a JSON object"],
        ["line 4", "sample 'rows/4': field 'txt' holds int, not bytes"],
        ["line 5", "key '../b' has a '..' component"],
        ["line 6", "label -1 is not an integer from 0 to 2147483647"],
        ["line 7", "sample 'rows/7' has no field"],
        ["line 8", "longer than max_line_bytes=100"],
    ]
    assert all(message.startswith(f"skipped {path}: line ") for message in messages)
    with pytest.raises(BadInput, match=f"^{path}: line 2: not JSON"):
        read(path, strict=True)


def test_an_fsspec_url_and_bad_columns(tmp_path):
    with fsspec.open("memory://jsonl/rows.jsonl", "wb") as f:
        f.write(b'{"caption": "a"}\n')
    assert read("memory://jsonl/rows.jsonl", {"txt": "caption"}) == ([PackSample("rows/1", -1, {"txt": b"a"})], [])
    for bad in ({}, {"label": "label"}, {"txt": "a..b"}):
        with pytest.raises(ArgumentError):
            read("memory://jsonl/rows.jsonl", bad)

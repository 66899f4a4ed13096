"""JSONL files of inline values as a SOURCE: one JSON object per line holding the sample itself.

`columns` maps names to keys of each object, as for Parquet: ``{"txt": "caption", "label": "label",
"key": "id"}``, a dotted path reaching into nested objects (``meta.caption``).  A field's value is
text (encoded UTF-8); a missing or null one leaves the field out of its row; ``label`` is an integer
(or decimal digits), ``key`` text obeying the key rule.  Without ``key`` a row's key is
``<file stem>/<line number>``.

A ``.jsonl`` SOURCE is a listing of paths unless this form is chosen (``from_="jsonl"``).  A line
that is not a JSON object, or breaks a rule, is one line naming the file and line (skipped;
BadInput under `strict`).  Memory: one line at a time, at most `max_line_bytes` (a longer line is
reported and skipped without being held).
"""
from __future__ import annotations

import io
import json
import posixpath

from corgi_io.errors import ArgumentError, BadInput
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit
from corgi_io.packing.sources.values import check_field_mapping, open_binary, sample_from_values, skip_or_raise

SUFFIXES = (".jsonl",)
MAX_LINE_BYTES = 1 << 26


def units(path: str):
    """One unit: the whole file (line boundaries are known only by reading it)."""
    return [Unit("jsonl", path)]


def read(unit: Unit, *, columns: dict, strict: bool = False, on_skip=None, max_line_bytes: int = MAX_LINE_BYTES):
    """The samples of one JSONL file, in line order (see the module docstring for what is skipped)."""
    check_field_mapping("columns", columns, "key path")
    if any("" in path.split(".") for path in columns.values()):
        raise ArgumentError(f"columns {columns!r}: a key path has an empty part")
    name = posixpath.basename(unit.path)
    stem = name[:-len(".jsonl")] if name.lower().endswith(".jsonl") else name
    with io.BufferedReader(open_binary(unit.path)) as file:  # readline(limit), which fsspec's files lack
        for number, line in _lines(file, max_line_bytes):
            try:
                yield _sample(line, columns, f"{stem}/{number}", max_line_bytes)
            except BadInput as exc:
                skip_or_raise(f"{unit.path}: line {number}: {exc}", strict, on_skip)


def _lines(file, max_line_bytes: int):
    """(line number, bytes or None when longer than `max_line_bytes`) of each non-blank line; a long line
    is read past in bounded pieces."""
    number = 0
    while True:
        line = file.readline(max_line_bytes + 1)
        if not line:
            return
        number += 1
        if len(line) > max_line_bytes:
            while line and not line.endswith(b"\n"):
                line = file.readline(max_line_bytes + 1)
            yield number, None
        elif line.strip():
            yield number, line


def _sample(line, columns: dict, default_key: str, max_line_bytes: int) -> PackSample:
    """The PackSample of one line's object by the `columns` mapping; BadInput naming what is wrong."""
    if line is None:
        raise BadInput(f"longer than max_line_bytes={max_line_bytes}")
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise BadInput(f"holds {type(row).__name__}, not a JSON object")
    return sample_from_values({name: _lookup(row, path) for name, path in columns.items()}, default_key)


def _lookup(row: dict, path: str):
    """The value at a dotted `path` of `row`, through nested objects; None when any part is missing."""
    value = row
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value

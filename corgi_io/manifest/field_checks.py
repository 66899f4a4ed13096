"""Checking a version-6 manifest's field rows: their count against the head's samples (`checks.parse_head`), and
each run of blocks' rows against its samples (`checks.check_block_rows`): a row per field of each sample's mask,
each field inside its record, in order, the primary one at the sample's payload.  Vectorised over the run's rows;
nothing here reads a file."""
from __future__ import annotations

import numpy as np

from corgi_io.manifest.limits import MAX_FIELDS, MAX_VALUE


def check_field_count(counts: dict, max_fields: int, fail) -> None:
    """counts.fields, the field rows a reader maps or allocates, is at most counts.samples x max_fields: checked
    when the head is parsed, before any allocation, so a forged count is one line, not an out-of-memory error."""
    if counts["fields"] > counts["samples"] * max_fields:
        fail(f"counts.fields {counts['fields']} is more than counts.samples {counts['samples']} x max_fields "
             f"{max_fields}")


def check_field_rows(m, rows: dict, start: int, fail, key) -> None:
    """Each sample's field rows (version 6): a row per bit of its mask, naming exactly those fields, each inside its
    record after the one before, its primary field's row at its payload.  `fail(text)` raises; `key(index)` names a
    sample in messages."""
    stop, total = start + len(rows["offset"]), len(m.field_rows)
    starts = np.asarray(m.field_start[start:stop + 1])
    if (starts[0] < 0 or starts[-1] > total or np.any(np.diff(starts) != np.bitwise_count(rows["fields"]))
            or (start == 0 and starts[0] != 0) or (stop == m.num_samples and starts[-1] != total)):
        fail("field starts disagree with the samples' field masks (a row per field)")
    f = {name: np.asarray(column[int(starts[0]):int(starts[-1])]) for name, column in m.field_rows.arrays.items()}
    owner = np.repeat(np.arange(len(rows["offset"])), np.diff(starts))  # each row's sample, from 0 here
    if f["id"].max() >= len(m.fields):
        fail(f"field id {int(f['id'].max())} outside the head's {len(m.fields)} fields")
    named = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), f["id"].astype(np.uint64)), starts[:-1] - starts[0])
    bad = np.flatnonzero(named != rows["fields"])
    if len(bad):
        fail(f"sample {start + int(bad[0])} ({key(start + int(bad[0]))}): its field rows name other fields than "
             "its field mask")
    _check_field_places(m, rows, f, owner, start, fail, key)


def _check_field_places(m, rows: dict, f: dict, owner: np.ndarray, start: int, fail, key) -> None:
    """Field rows inside their record, each after the one before, framing included; the primary one (sample_ext's
    field) at the sample's payload."""
    offset, length = f["offset"], f["length"]
    header, end = offset - f["framing"].astype(np.int64), offset + length
    record = rows["offset"][owner]
    bad = ((offset < 0) | (offset > MAX_VALUE) | (length < 0) | (length > MAX_VALUE) | (header < record)
           | (end > record + rows["length"][owner]))
    bad[1:] |= (owner[1:] == owner[:-1]) & (header[1:] < end[:-1])
    position = {name: i for i, name in enumerate(m.fields)}
    primary = np.array([position.get(name, MAX_FIELDS) for name in m.extensions])[rows["ext"]][owner] == f["id"]
    bad |= primary & ((offset != rows["data_offset"][owner]) | (length != rows["bytes"][owner]))
    if np.any(bad):
        i = int(owner[np.flatnonzero(bad)[0]])
        fail(f"sample {start + i} ({key(start + i)}): a field's byte range lies outside its record, overlaps "
             "another, or disagrees with its payload")

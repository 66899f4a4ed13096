"""Each field's place in its shard (manifest version 6): what a reader of some fields, or an index for another
loader, asks the manifest.

A pack records, for every field of every sample, where its framing starts (a tar member's header, a TFRecord
feature's map entry), where its payload starts, its length, and a checksum of the payload alone (schema.py's
FIELD_COLUMNS; sample i's rows are [field_start[i], field_start[i + 1]), in shard order).  `field_ranges` selects
them for a run of samples and some field names, as numpy arrays (nothing per sample in Python), after the rows
are validated like every other per-sample row.  `label_members` gives a WebDataset pack's ``<key>.cls`` members:
they hold the label, which is not a field, and their place follows from the record's end, so they are not stored.

    ranges = manifest.field_ranges(0, manifest.num_samples, ["txt"])
    for sample, offset, length, crc in zip(ranges.sample, ranges.offset, ranges.length, ranges.crc):
        shard = manifest.shards.path(manifest.samples.shard[sample])   # read [offset, offset + length) of it;
        ...                                                            # crc32c(payload) == crc
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from corgi_io.errors import ArgumentError, ManifestError

TAR_BLOCK = 512  # a tar member's header and payload start on this boundary; the label member's digits fit one


class FieldRanges(NamedTuple):
    """Field rows of a run of samples, one entry per field, ordered by sample then by place in its record."""

    sample: np.ndarray  # int64: the sample's index in the pack (its shard: manifest.samples.shard[sample])
    field: np.ndarray   # uint8: the field, an index into manifest.fields
    header: np.ndarray  # int64: where its framing starts in the shard (tar header, TFRecord feature map entry)
    offset: np.ndarray  # int64: where its payload starts in the shard
    length: np.ndarray  # int64: payload bytes
    crc: np.ndarray     # uint32: manifest.checksum (crc32c) of the payload alone


class LabelMembers(NamedTuple):
    """The ``<key>.cls`` tar members of a run of labeled samples (a WebDataset pack's), one entry per member."""

    sample: np.ndarray  # int64: the sample's index in the pack
    header: np.ndarray  # int64: where the member's header starts in the shard (a pax header's, for a long key)
    offset: np.ndarray  # int64: where its payload (the label's decimal digits) starts
    length: np.ndarray  # int64: the digits' count


def field_ids(m, names) -> np.ndarray:
    """The ids (into `m.fields`) of field `names`; ArgumentError naming the pack and its fields for any other name."""
    position = {name: i for i, name in enumerate(m.fields)}
    unknown = [name for name in names if name not in position]
    if unknown:
        raise ArgumentError(f"{m.root}: no field {unknown[0]!r} in this pack (its fields: {', '.join(m.fields)})")
    return np.array([position[name] for name in names], dtype=np.uint8)


def field_ranges(m, start: int = 0, stop: int | None = None, fields=None) -> FieldRanges:
    """The fields of samples [start, stop) of `m` (all by default), only those named in `fields` when given.

    Raises ManifestError for a pack before version 6 (it records no per-field ranges), and for rows that fail
    their validation; ArgumentError for a field name the pack does not have.  Memory: the rows of the run.
    """
    wanted = None if fields is None else field_ids(m, list(fields))
    rows = _field_rows(m, start, stop)
    if rows is None:
        empty = np.zeros(0, np.int64)
        return FieldRanges(empty, np.zeros(0, np.uint8), empty, empty, empty, np.zeros(0, np.uint32))
    sample, f = rows
    keep = slice(None) if wanted is None else np.isin(f["id"], wanted)
    offset = f["offset"][keep]
    return FieldRanges(sample[keep], f["id"][keep], offset - f["framing"][keep].astype(np.int64), offset,
                       f["length"][keep], f["crc"][keep])


def label_members(m, start: int = 0, stop: int | None = None) -> LabelMembers:
    """The ``<key>.cls`` members of the labeled samples among [start, stop) of a WebDataset pack `m`.

    The label member follows a sample's last field: its header starts at that field's payload end rounded up to
    TAR_BLOCK, and its digits fill the record's last TAR_BLOCK bytes (formats/wds.py).  ArgumentError for a
    TFRecord pack (its label is the int64 feature ``label``); ManifestError as `field_ranges`.
    """
    if m.format != "wds":
        raise ArgumentError(f"{m.root}: a {m.format} pack has no label members (its label is the feature 'label')")
    rows = _field_rows(m, start, stop)
    if rows is None:
        empty = np.zeros(0, np.int64)
        return LabelMembers(empty, empty, empty, empty)
    sample, f = rows
    last = np.flatnonzero(np.append(sample[1:] != sample[:-1], True))  # each sample's last field row
    sample = sample[last]
    label = np.asarray(m.samples.label[int(sample[0]):int(sample[-1]) + 1])[sample - sample[0]]
    labeled = label >= 0
    end = (f["offset"] + f["length"])[last][labeled]
    record_end = np.asarray(m.samples.offset[sample[labeled]]) + np.asarray(m.samples.length[sample[labeled]])
    digits = np.char.str_len(label[labeled].astype(str)).astype(np.int64)
    return LabelMembers(sample[labeled], -(-end // TAR_BLOCK) * TAR_BLOCK, record_end - TAR_BLOCK, digits)


def _field_rows(m, start: int, stop: int | None):
    """(each row's sample, {FIELD_COLUMNS name: rows}) of samples [start, stop), validated; None when the run is
    empty; ManifestError for a pack without per-field ranges."""
    if m.field_start is None:
        raise ManifestError(f"{m.columns_url}: a version-{m.version} pack records no per-field byte ranges "
                            "(version 6 on); repack it (corgi pack OLD NEW) to have them")
    start, stop = max(0, int(start)), m.num_samples if stop is None else min(int(stop), m.num_samples)
    if start >= stop:
        return None
    m.validate_rows(start, stop)
    bounds = np.asarray(m.field_start[start:stop + 1])
    sample = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(bounds))
    rows = slice(int(bounds[0]), int(bounds[-1]))
    return sample, {name: np.asarray(column[rows]) for name, column in m.field_rows.arrays.items()}

"""The manifest's columns, built last from the shard records and the pack-order table, one at a time.

A written sample is known by its position (its row in the pack-order table): its label and key
come from the table; its offsets, primary payload bytes, size, checksum, kind, extension and field
mask from its shard's record (the last two in the task's own numbering, mapped onto the pack's
names: field_masks.py), since the pack-time transforms (a user's --map) may change them.  Each per-sample column is a `LazyColumn`, built when `save_manifest` writes it
and dropped right after, and the keys are gathered last, so the driver holds the written positions
and either one column or the keys, however large the pack.
"""
from __future__ import annotations

import numpy as np

from corgi_io.packing.field_masks import remap_ids, remap_masks
from corgi_io.packing.records import SAMPLE_FIELDS, load_column
from corgi_io.packing.table import gather_column, gather_keys

def block_columns(block_of: np.ndarray, shard, column) -> dict:
    """The manifest's block columns: a block is each run of samples with one value of `block_of` (a block id per
    sample in manifest order, dropped once its runs are found); `shard()` and `column(name)` give the samples'
    shard and record columns (offset, length, size), built one or two at a time."""
    first = np.flatnonzero(np.diff(block_of, prepend=-1) != 0)
    count = np.diff(np.append(first, len(block_of)))
    del block_of
    last = first + count - 1
    offset, length = column("offset"), column("length")
    blocks = dict(shard=shard()[first], offset=offset[first], first=first, count=count,
                  length=offset[last] + length[last] - offset[first])
    del offset, length
    size = column("size")
    blocks["size_sum"] = np.add.reduceat(size, first) if len(first) else np.zeros(0, np.int64)
    return blocks


class LazyColumn:
    """A column built when numpy first asks for it (``np.asarray`` calls ``__array__``)."""

    def __init__(self, build, built=None):
        self._build, self._built = build, built

    def __array__(self, dtype=None, copy=None):
        column = self._build()
        if self._built is not None:
            self._built()
        return column if dtype is None else column.astype(dtype, copy=False)


class ManifestColumns:
    """Samples, blocks and keys of a finished pack, from `records` ({shard: record path}, every shard), `done` (their
    ShardDones, in shard order) and `plan`; `field_names` and `extensions` are the pack's (field_masks.pack_names)."""

    def __init__(self, plan, table, records: dict, done: list, field_names: list, extensions: list):
        self.plan, self.table, self.done = plan, table, done
        self.field_names, self.extensions = field_names, extensions
        self.counts = [record.samples for record in done]
        self.paths = [records[shard] for shard in range(plan.num_shards)]
        self.positions = self.from_records("position")

    def from_records(self, name: str, convert=None) -> np.ndarray:
        """Record field `name` of every written sample, in manifest order; `convert(column, done)` per shard."""
        column = np.empty(sum(self.counts), dtype=SAMPLE_FIELDS[name])
        start = 0
        for path, count, done in zip(self.paths, self.counts, self.done):
            part = load_column(path, name)
            column[start:start + count] = part if convert is None else convert(part, done)
            start += count
        return column

    def shard(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.counts), dtype=np.int32), self.counts)

    def samples(self, built=None) -> dict:
        """{manifest column: LazyColumn}; `built()` is called as each one is built."""
        def lazy(build):
            return LazyColumn(build, built)

        columns = {name: lazy(lambda name=name: self.from_records(name))
                   for name in ("bytes", "size", "offset", "length", "data_offset", "checksum", "kind")}
        columns["label"] = lazy(lambda: gather_column(self.table, "label", self.positions, self.plan.num_samples))
        columns["ext"] = lazy(lambda: self.from_records(
            "ext", lambda ids, done: remap_ids(ids, done.extensions, self.extensions)))
        columns["fields"] = lazy(lambda: self.from_records(
            "fields", lambda masks, done: remap_masks(masks, done.field_names, self.field_names)))
        columns["shard"] = lazy(self.shard)
        return columns

    def blocks(self) -> dict:
        """A block is a run of written samples that share a planned block (skips may empty or shrink one)."""
        return block_columns(np.searchsorted(self.plan.block_starts, self.positions, side="right") - 1, self.shard,
                             self.from_records)

    def keys(self) -> tuple:
        """(uint8 blob, int64 offsets) of the written samples' keys."""
        return gather_keys(self.table, self.positions, self.plan.num_samples)

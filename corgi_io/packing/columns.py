"""The manifest's columns, built last from the shard records and the pack-order table, one at a time.

A written sample is known by its position (its row in the pack-order table): its label, kind,
extension, field mask and key come from the table (the first three as the pack-time transforms change
every sample's: `rewrite`), its offsets, primary payload bytes, size and
checksum from its shard's record.  Each per-sample column is a `LazyColumn`, built when `save_manifest` writes it
and dropped right after, and the keys are gathered last, so the driver holds the written positions
and either one column or the keys, however large the pack.
"""
from __future__ import annotations

import numpy as np

from corgi_io.packing.records import SAMPLE_FIELDS, load_column
from corgi_io.packing.table import gather_column, gather_keys

FROM_TABLE = {"label": "label", "kind": "kind", "ext": "ext", "fields": "fields"}  # manifest column -> table field


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
    """Samples, blocks and keys of a finished pack, from `records` ({shard: record path}, every shard) and `plan`."""

    def __init__(self, plan, table, records: dict, counts: list, rewrite: dict | None = None):
        self.plan, self.table, self.counts, self.rewrite = plan, table, counts, rewrite or {}
        self.paths = [records[shard] for shard in range(plan.num_shards)]
        self.positions = self.from_records("position")

    def from_records(self, name: str) -> np.ndarray:
        """Record field `name` of every written sample, in manifest order."""
        column = np.empty(sum(self.counts), dtype=SAMPLE_FIELDS[name])
        start = 0
        for path, count in zip(self.paths, self.counts):
            column[start:start + count] = load_column(path, name)
            start += count
        return column

    def shard(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.counts), dtype=np.int32), self.counts)

    def from_table(self, field: str) -> np.ndarray:
        """Table field `field` of every written sample, in manifest order, as the transforms left it (`rewrite`)."""
        column = gather_column(self.table, field, self.positions, self.plan.num_samples)
        return self.rewrite[field](column) if field in self.rewrite else column

    def samples(self, built=None) -> dict:
        """{manifest column: LazyColumn}; `built()` is called as each one is built."""
        def lazy(build):
            return LazyColumn(build, built)

        columns = {name: lazy(lambda field=field: self.from_table(field)) for name, field in FROM_TABLE.items()}
        columns.update({name: lazy(lambda name=name: self.from_records(name))
                        for name in ("bytes", "size", "offset", "length", "data_offset", "checksum")})
        columns["shard"] = lazy(self.shard)
        return columns

    def blocks(self) -> dict:
        """A block is a run of written samples that share a planned block (skips may empty or shrink one)."""
        planned = np.searchsorted(self.plan.block_starts, self.positions, side="right") - 1
        first = np.flatnonzero(np.diff(planned, prepend=-1) != 0)
        del planned
        count = np.diff(np.append(first, len(self.positions)))
        last = first + count - 1
        offset, length = self.from_records("offset"), self.from_records("length")
        blocks = dict(shard=self.shard()[first], offset=offset[first], first=first, count=count,
                      length=offset[last] + length[last] - offset[first])
        del offset, length
        size = self.from_records("size")
        blocks["size_sum"] = np.add.reduceat(size, first) if len(first) else np.zeros(0, np.int64)
        return blocks

    def keys(self) -> tuple:
        """(uint8 blob, int64 offsets) of the written samples' keys."""
        return gather_keys(self.table, self.positions, self.plan.num_samples)

"""One unit's encoded records into blocks and shards: the running CRC, the block cuts, the shard sealing.

A write task (unit_task.py) hands each encoded sample to `ShardWriter.add`; the unit's `BlockCuts`
says where a block ends: where the plan cut it (a folder's planned shard: `PlannedBlocks`), or
when it is full (a unit of shards or tables: `GreedyBlocks`, the rule of `layout.py` applied
online).  With a shard limit, a closed block that would overflow the open shard seals it first,
so the open block's records are held until it closes; without one (a planned shard: one shard
per unit) they are written WRITE_BYTES at a time, so a block is never held whole (a --map may
make it far larger than its inputs).  The CRC runs through each block and restarts at the next
(checksum.py).  Every shard keeps its temporary name until `finish` has saved the unit's record.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from corgi_io.manifest.checksum import DEFAULT_CHECKSUM, checksum_function
from corgi_io.packing.records import UnitColumns, UnitDone, save_record
from corgi_io.packing.shard_file import ShardFile

WRITE_BYTES = 4 << 20  # encoded records handed to a shard file at a time, where no shard limit makes it wait


@dataclass(frozen=True)
class PlannedBlocks:
    """Blocks where the plan cut them: `starts` are the item indices that begin a block, ascending (the first 0)."""

    starts: tuple

    def closes(self, index: int, opened: int, block_bytes: int, block_samples: int) -> bool:
        """Whether item `index` lies in another planned block than item `opened`, the open block's first (skips may
        leave a planned block with no sample, or without its first)."""
        return bisect_right(self.starts, index) != bisect_right(self.starts, opened)


@dataclass(frozen=True)
class GreedyBlocks:
    """Blocks closed when the next record would pass `most_bytes` or they hold `most_samples` (layout.py's rule)."""

    most_bytes: int
    most_samples: int

    def closes(self, index: int, opened: int, block_bytes: int, block_samples: int) -> bool:
        """Whether the open block, `block_bytes` with the next record and `block_samples` without it, is full."""
        return block_bytes > self.most_bytes or block_samples >= self.most_samples


class ShardWriter:
    """Appends a unit's records to blocks and shards of format `fmt`, their columns to `columns`.

    `shard_path(n)` names the unit's shard n; `shard_limit` is the most bytes of records a shard holds (None: one
    shard, opened at once, so that a unit whose samples are all skipped still has its shard)."""

    def __init__(self, fmt, columns: UnitColumns, cuts, shard_path, shard_limit: int | None):
        self.fmt, self.columns, self.cuts = fmt, columns, cuts
        self.shard_path, self.shard_limit = shard_path, shard_limit
        self.checksum = checksum_function(DEFAULT_CHECKSUM)
        self.rows, self.parts, self.block_bytes, self.waiting, self.crc, self.opened = [], [], 0, 0, 0, 0
        self.shards, self.shard, self.base = [], None, 0  # sealed ShardFiles; the open one; the open block's start
        if shard_limit is None:
            self._open_shard()

    def add(self, index: int, record: list, data_offset: int, row: tuple) -> None:
        """Append the encoded `record` of item `index` (its primary payload at `data_offset` of it) to the open block,
        closing that first where the cuts say; `row` is (primary bytes, size, kind, ext, label, mask, key, fields),
        `fields` a (field id, framing bytes, payload offset in the record, length, CRC) per field (records.py)."""
        length = sum(map(len, record))
        if self.rows and self.cuts.closes(index, self.opened, self.block_bytes + length, len(self.rows)):
            self.close_block()
        if not self.rows:
            self.opened = index
        crc = self.crc if self.rows else 0
        for part in record:
            crc = self.checksum(part, crc)
        self.crc = crc
        nbytes, size, kind, ext, label, mask, key, fields = row
        self.rows.append((self.block_bytes, length, self.block_bytes + data_offset, nbytes, size, crc, kind, ext,
                          label, mask, key, fields))
        self.parts += record
        self.block_bytes += length
        self.waiting += length
        if self.shard_limit is None and self.waiting >= WRITE_BYTES:
            self._write()

    def close_block(self) -> None:
        """Append the open block to the open shard, first sealing that shard when the block would overflow it."""
        if not self.rows:
            return
        if self.shard_limit is not None:
            if self.shard is not None and self.shard.size and self.shard.size + self.block_bytes > self.shard_limit:
                self._seal_shard()
            if self.shard is None:
                self._open_shard()
            self.base = self.shard.size
        for row in self.rows:
            self.columns.add(len(self.shards), self.base, row)
        self.columns.end_block()
        self._write()
        self.rows, self.block_bytes = [], 0
        self.base = self.shard.size

    def _write(self) -> None:
        self.shard.write(self.parts, self.waiting)
        self.parts, self.waiting = [], 0

    def _open_shard(self) -> None:
        self.shard = ShardFile(self.fmt, self.shard_path(len(self.shards)))
        self.base = 0

    def _seal_shard(self) -> None:
        offsets, lengths = self.columns.shard_records(len(self.shards))
        self.shard.seal(offsets, lengths)
        self.shards.append(self.shard)
        self.shard = None

    def finish(self, done, record: str) -> UnitDone:
        """Close the last block and shard, save the unit's record (`done(shards)` makes its summary from the sealed
        ShardFiles), then rename its shards into place."""
        self.close_block()
        if self.shard is not None:
            self._seal_shard()
        summary = done(self.shards)
        save_record(record, summary, self.columns)
        self.columns.close()
        for shard in self.shards:
            shard.publish()
        return summary

    def abort(self) -> None:
        """Drop the temporary files of the unit's unfinished shards, and its columns' spill file."""
        self.columns.close()
        for shard in [*self.shards, *([self.shard] if self.shard is not None else [])]:
            shard.abort()

    def where(self):
        """The file an error names: the open shard, else the last sealed one, else the first to come."""
        shard = self.shard or (self.shards[-1] if self.shards else None)
        return shard.path if shard is not None else self.shard_path(0)

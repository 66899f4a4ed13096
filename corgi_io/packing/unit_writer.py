"""The worker side of `corgi pack` over existing shards or tables: one task packs one source unit into its own shards.

A unit (a tar, a TFRecord file, a Parquet row group, a JSONL file: see `packing.sources`) is read
as a stream of `PackSample`s, in its order.  Each sample is checked (`SampleRules`), sized, run
through the pack-time transforms and the size filter, encoded, and appended to the unit's open
block; blocks and shards are cut greedily as they fill, by the rule of `layout.py` applied online,
so the task holds one block of records in memory, whatever the unit holds.

The unit's shards are ``shard-<unit>-<n><suffix>``, written under temporary names.  When the unit
is done its record (every sample's columns and key, the field names, the skips; `unit_records`) is
saved, and only then are the shards renamed into place: a unit whose record exists and whose
shards all exist at their recorded sizes is finished, and a rerun packs every other unit again,
to the same bytes (nothing here depends on the executor or on time).
"""
from __future__ import annotations

from dataclasses import dataclass

from corgi_io.errors import BadInput, PackError
from corgi_io.formats import get_format
from corgi_io.manifest import DUPLICATE_REASON
from corgi_io.manifest.checksum import DEFAULT_CHECKSUM, checksum_function
from corgi_io.packing import executors
from corgi_io.packing.dedup_pass import duplicate_mask
from corgi_io.packing.pack_plan import PackOptions
from corgi_io.packing.sample_rules import SampleRules
from corgi_io.packing.shard_file import ShardFile, naming
from corgi_io.packing.sources.unit_list import Unit, read_unit
from corgi_io.packing.unit_records import UnitColumns, UnitDone, save_unit_record, unit_shard_name

REPORT_EVERY = 256  # samples between progress reports


@dataclass(frozen=True)
class UnitTask:
    """One unit to pack; small enough to send anywhere."""

    index: int            # the unit's place among SOURCE's units: its shards are named by it
    unit: Unit
    output: str           # OUTPUT, where its shards go
    record: str           # its record in .corgi-partial/
    read_options: dict    # what its form's reader takes (label_field, features or columns)
    options: PackOptions
    strict: bool
    duplicates: str | None = None  # --dedup: the mask of samples to leave out (dedup_pass.py), in stream order
    bounds: tuple = (0, 0)         # the unit's samples in that mask: [first, stop)

    @property
    def path(self) -> str:
        """What the task packs, for messages (an executor names a failed task by it): the unit's file."""
        return self.unit.name

    def sample_at(self, position: int) -> str:
        """The unit's sample at `position` of its stream (from 0), for messages (the executor names a dead worker's
        sample: the one it was reading or packing, marked before it is read).  By number, not key: the key would mean
        reading the unit again, in the driver."""
        return f"sample #{position} of {self.path}"


def write_unit(task: UnitTask) -> UnitDone:
    """Pack the samples of `task.unit` into its shards; bad inputs are skipped (recorded), or fail under strict."""
    writer = _UnitWriter(task)
    try:
        with naming(task.output):
            samples = read_unit(task.unit, strict=task.strict, on_skip=writer.reader_skipped, **task.read_options)
            mark = executors.sample_marker()
            mark(0)  # the sample about to be read: a worker that dies inside the reader (pyarrow, an OOM) names it
            for count, sample in enumerate(samples, 1):
                writer.add(sample, duplicate=writer.duplicates is not None and writer.duplicates[count - 1])
                mark(count)
                if count % REPORT_EVERY == 0:
                    executors.report(*writer.progress())
            mark(-1)  # all read: a worker that dies sealing the shards names the unit
            done = writer.finish()
            executors.report(*writer.progress())
            return done
    except BadInput as exc:  # a reader's bad input under strict
        writer.abort()
        raise PackError(str(exc)) from None
    except BaseException:
        writer.abort()
        raise


class _UnitWriter:
    """Collects a unit's records into blocks and shards, and its per-sample columns into `UnitColumns`."""

    def __init__(self, task: UnitTask):
        options = task.options
        self.task, self.fmt = task, get_format(options.format)
        self.rules = SampleRules(options, task.strict)
        self.checksum = checksum_function(DEFAULT_CHECKSUM)
        self.columns = UnitColumns()
        self.block, self.block_bytes, self.crc = [], 0, 0   # the open block's records: (parts, length, row)
        self.shards, self.shard = [], None                 # sealed ShardFiles; the open one
        self.skipped, self.payload_bytes, self._reported = [], 0, [0, 0]
        self.fields_dropped = 0  # skip records of fields left out of samples that are packed (not samples handled)
        self.block_limit = (options.block_bytes, options.block_samples)
        self.shard_limit = max(1, options.shard_bytes - len(self.fmt.TRAILER))
        self.duplicates = duplicate_mask(task.duplicates, *task.bounds)

    def reader_skipped(self, message: str) -> None:
        """A reader's skip (a bad member, record or row): recorded against the unit's file (named once: the
        reader's message may begin with it too)."""
        path = self.task.unit.path
        reason = message.removeprefix("skipped ").removeprefix(f"{path}: ")
        self.skipped.append({"path": path, "reason": reason})

    def add(self, sample, duplicate: bool = False) -> None:
        """Check, size, transform and encode one sample into the open block (closing it first when full); a
        `duplicate` (--dedup) is only recorded as skipped."""
        accepted = {"reason": DUPLICATE_REASON} if duplicate else self.rules.accept(sample)
        if isinstance(accepted, dict):  # a skip record
            self.skipped.append(dict(accepted, path=f"{self.task.unit.path}: {sample.key}"))
            return
        primary, kind, size, fields, dropped = accepted
        self.skipped += [dict(skip, path=f"{self.task.unit.path}: {sample.key}") for skip in dropped]
        self.fields_dropped += len(dropped)
        try:
            mask, ext = self.columns.names.mask(fields, sample.key), self.columns.names.ext(primary)
        except BadInput as exc:
            if self.task.strict:
                raise PackError(f"{self.task.unit.path}: {exc}") from None
            self.skipped.append({"path": f"{self.task.unit.path}: {sample.key}", "reason": str(exc)})
            return
        record, data_offset = self.fmt.encode(sample.key, primary, fields[primary], sample.label, size,
                                              [(name, value) for name, value in fields.items() if name != primary])
        length = sum(map(len, record))
        bytes_limit, samples_limit = self.block_limit
        if self.block and (self.block_bytes + length > bytes_limit or len(self.block) >= samples_limit):
            self._close_block()
        self.crc = crc = self._crc(record)
        self.block.append((record, length, (self.block_bytes, length, self.block_bytes + data_offset,
                                            len(fields[primary]), size, crc, kind, ext, sample.label, mask,
                                            sample.key)))
        self.block_bytes += length
        self.payload_bytes += sum(map(len, fields.values()))

    def _crc(self, record: list) -> int:
        """The running CRC of the open block through `record` (checksum.py: it restarts at each block)."""
        crc = self.crc if self.block else 0
        for part in record:
            crc = self.checksum(part, crc)
        return crc

    def _close_block(self) -> None:
        """Append the open block to the open shard, first sealing that shard when the block would overflow it."""
        if not self.block:
            return
        if self.shard is not None and self.shard.size and self.shard.size + self.block_bytes > self.shard_limit:
            self._seal_shard()
        if self.shard is None:
            name = unit_shard_name(self.task.index, len(self.shards), self.fmt.SUFFIX)
            self.shard = ShardFile(self.fmt, f"{self.task.output}/{name}")
        base = self.shard.size
        for _, _, row in self.block:
            self.columns.add(len(self.shards), base, row)
        self.columns.end_block()
        self.shard.write([part for record, _, _ in self.block for part in record], self.block_bytes)
        self.block, self.block_bytes = [], 0

    def _seal_shard(self) -> None:
        offsets, lengths = self.columns.shard_records(len(self.shards))
        self.shard.seal(offsets, lengths)
        self.shards.append(self.shard)
        self.shard = None

    def finish(self) -> UnitDone:
        """Close the last block and shard, save the unit's record, then rename its shards into place."""
        self._close_block()
        if self.shard is not None:
            self._seal_shard()
        shard_bytes = [shard.size for shard in self.shards]  # the trailer included
        columns = self.columns
        done = UnitDone(self.task.index, tuple(shard.path.name for shard in self.shards), tuple(shard_bytes),
                        columns.shard_samples(), columns.count, self.payload_bytes, tuple(self.skipped),
                        tuple(columns.names.bits), tuple(columns.names.extensions))
        save_unit_record(self.task.record, done, self.columns)
        for shard in self.shards:
            shard.publish()
        return done

    def abort(self) -> None:
        """Drop the temporary files of the unit's unfinished shards."""
        for shard in [*self.shards, *([self.shard] if self.shard is not None else [])]:
            shard.abort()

    def progress(self) -> tuple:
        """(samples, payload bytes) handled since the last call, for the progress display."""
        now = [self.columns.count + len(self.block) + len(self.skipped) - self.fields_dropped, self.payload_bytes]
        new = (now[0] - self._reported[0], now[1] - self._reported[1])
        self._reported = now
        return new


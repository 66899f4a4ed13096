"""The worker side of `corgi pack`: one task packs one unit of any SOURCE into its shards and its record.

A unit is a folder pack's planned shard (`sources.folder.FolderShard`) or one tar, TFRecord file,
Parquet row group or JSONL file (`sources.stream_unit.StreamUnit`); its reader yields its samples in
order and applies the input rules.  Every sample then takes the one path: the --dedup mask, the
input rules, the transforms and the size filter (`OutputRules`), the field mask in the task's own
numbering (field_masks.py), the format's record, and the unit's blocks and shards
(shard_writer.py).  The task saves its record, then renames its shards into place, and returns
only a `UnitDone`; the same function runs in this process, a local pool or on any Dask worker
that sees OUTPUT, so the bytes never depend on where.
"""
from __future__ import annotations

from dataclasses import dataclass

from corgi_io.errors import BadInput, PackError
from corgi_io.formats import get_format
from corgi_io.manifest import DUPLICATE_REASON, KINDS
from corgi_io.manifest.checksum import DEFAULT_CHECKSUM, checksum_function
from corgi_io.packing import executors
from corgi_io.packing.dedup_pass import duplicate_mask
from corgi_io.packing.records import UnitColumns, UnitDone
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sample_rules import OutputRules
from corgi_io.packing.shard_file import naming
from corgi_io.packing.shard_writer import ShardWriter
from corgi_io.packing.transforms import Drop

REPORT_EVERY = 256  # samples between progress reports
KIND_ID = {kind: i for i, kind in enumerate(KINDS)}


@dataclass(frozen=True)
class WriteTask:
    """One unit to pack; small enough to send anywhere (no per-sample data)."""

    index: int            # the unit's place among SOURCE's units
    unit: object          # a FolderShard or a StreamUnit: what it reads, how, and its shards' names
    output: str           # OUTPUT, where its shards go
    record: str           # its record in .corgi-partial/
    options: object       # the PackOptions
    strict: bool
    duplicates: str | None = None  # --dedup: the mask of samples to leave out (dedup_pass.py)
    bounds: tuple = (0, 0)         # the unit's samples in that mask: [first, stop)

    @property
    def path(self) -> str:
        """What the task packs, for messages (an executor names a failed task by it)."""
        return self.unit.name

    def sample_at(self, index: int) -> str:
        """The unit's sample `index`, for messages (the executor names a dead worker's sample)."""
        return self.unit.sample_at(index)


def write_unit(task: WriteTask) -> UnitDone:
    """Pack the samples of `task.unit` into its shards; bad inputs are skipped (recorded), or fail under strict."""
    packer = _UnitPacker(task)
    try:
        with naming(packer.writer.where):
            packer.run()
            return packer.finish()
    except BadInput as exc:  # a reader's bad input under strict
        packer.writer.abort()
        raise PackError(str(exc)) from None
    except BaseException:
        packer.writer.abort()
        raise


class _UnitPacker:
    """One unit's samples through the rules, the transforms and the encoder into its `ShardWriter`."""

    def __init__(self, task: WriteTask):
        self.task, self.fmt, self.strict = task, get_format(task.options.format), task.strict
        self.skipped, self.payload_bytes, self.reported = [], 0, [0, 0]
        self.reader = task.unit.reader(task.options, task.strict, self.skipped)
        self.output = OutputRules.of(task.options)
        self.columns = UnitColumns(task.record)
        cuts, shard_limit = task.unit.layout(task.options, self.fmt)
        self.writer = ShardWriter(self.fmt, self.columns, cuts,
                                  lambda number: f"{task.output}/{task.unit.shard_name(number, self.fmt.SUFFIX)}",
                                  shard_limit)
        self.duplicates = duplicate_mask(task.duplicates, *task.bounds)
        self.handled, self.checksum = 0, checksum_function(DEFAULT_CHECKSUM)  # each field's payload's own CRC

    def run(self) -> None:
        """Pack every sample of the unit, in order, reporting progress every REPORT_EVERY."""
        mark, duplicates = executors.sample_marker(), self.duplicates
        mark(0)  # the sample about to be read: a worker that dies inside the reader (pyarrow, an OOM) names it
        for index, item in enumerate(self.reader.items()):
            if duplicates is not None and duplicates[index]:
                self.reader.skip(item, DUPLICATE_REASON)
            else:
                self._pack(index, item)
            self.handled = index + 1
            mark(self.handled)
            if self.handled % REPORT_EVERY == 0:
                executors.report(*self.progress())
        mark(-1)  # all read: a worker that dies sealing the shards names the unit

    def _pack(self, index: int, item) -> None:
        """Take one sample through the rules and transforms, encode it and hand it to the writer."""
        try:
            sample = self.reader.prepare(item)
            if sample is not None and self.output:
                sample = self._transformed(item, *sample)
            if sample is None:
                return
            key, label, primary, kind, size, fields, dropped = sample
            for skip in dropped:  # fields left out of a sample that is packed
                self.reader.skip(item, skip["reason"])
            mask, ext = self.columns.names.mask(fields), self.columns.names.ext(primary)
        except BadInput as exc:
            if self.strict:
                raise PackError(f"{self.reader.where(item)}: {exc}") from None
            return self.reader.skip(item, str(exc))
        record, spans = self.fmt.encode(key, primary, fields[primary], label, size,
                                        [(name, value) for name, value in fields.items() if name != primary])
        bits, checksum = self.columns.names.bits, self.checksum
        places = [(bits[span.name], span.offset - span.header, span.offset, span.length, checksum(fields[span.name]))
                  for span in spans]
        data_offset = next(span.offset for span in spans if span.name == primary)
        self.writer.add(index, record, data_offset,
                        (len(fields[primary]), size, KIND_ID[kind], ext, label, mask, key, places))
        self.payload_bytes += sum(map(len, fields.values()))
        return None

    def _transformed(self, item, key, label, primary, kind, size, fields, dropped):
        """The sample after the transforms and the size filter, or None when they leave it out (recorded)."""
        result = self.output.apply(PackSample(key, label, fields), primary, kind, size)
        if isinstance(result, Drop):
            return self.reader.skip(item, result.reason)
        primary, kind, fields, size = result
        return key, label, primary, kind, size, fields, dropped

    def finish(self) -> UnitDone:
        """Close the unit's last block and shard, save its record and rename its shards into place."""
        def done(shards: list) -> UnitDone:
            columns = self.columns
            return UnitDone(self.task.index, tuple(shard.path.name for shard in shards), tuple(shard.size for shard in shards),
                            columns.shard_samples(), columns.count, self.payload_bytes, tuple(self.skipped),
                            tuple(columns.names.bits), tuple(columns.names.extensions), columns.field_count)

        summary = self.writer.finish(done, self.task.record)
        executors.report(*self.progress())
        return summary

    def progress(self) -> tuple:
        """(samples, payload bytes) handled since the last call, for the progress display."""
        now = [self.handled, self.payload_bytes]
        new = (now[0] - self.reported[0], now[1] - self.reported[1])
        self.reported = now
        return new

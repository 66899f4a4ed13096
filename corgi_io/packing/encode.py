"""The worker side of `corgi pack`: one task writes one whole shard, straight into OUTPUT.

A `ShardTask` is a few numbers and paths: the task reads its samples' rows from the pack-order
table (table.py), then for each block reads the files (all the fields of each sample), probes the
primary fields' sizes, runs the pack-time transforms and the size filter, encodes the records,
and appends them to the shard, which it fsyncs, records and renames into place (shard_file.py).
It returns only a `ShardDone`.  The same function runs in this process, in a local process pool,
or on any worker that sees OUTPUT (a shared file system), so the bytes never depend on where.
"""
from __future__ import annotations

import array
from dataclasses import dataclass

from corgi_io.manifest.checksum import DEFAULT_CHECKSUM, checksum_function
from corgi_io.errors import BadInput, PackError
from corgi_io.formats import get_format
from corgi_io.manifest import DUPLICATE_REASON, KINDS
from corgi_io.packing import executors
from corgi_io.packing.dedup_pass import duplicate_mask
from corgi_io.packing.records import SAMPLE_FIELDS, ShardDone
from corgi_io.packing.regular_files import read_regular_file
from corgi_io.packing.shard_file import ShardFile, naming
from corgi_io.packing.sizing import probe_size
from corgi_io.packing.user_code import load_function
from corgi_io.packing.table import Table, read_rows
from corgi_io.packing.field_masks import TaskNames
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sample_rules import OutputRules
from corgi_io.packing.transforms import Drop
from corgi_io.packing.walk import field_name, printable

ROWS_AT_ONCE = 4096  # table rows a task reads at a time (whole blocks, at least one)
WRITE_BYTES = 4 << 20  # encoded records handed to the shard file at a time (and one more write in flight)


@dataclass(frozen=True)
class ShardTask:
    """One shard to write; small enough to send anywhere (no per-sample data)."""

    shard: int
    path: str             # the shard's final path in OUTPUT
    record: str           # its record in .corgi-partial/
    table: Table          # the pack-order table its rows are read from
    blocks: tuple         # the first position of each of its blocks, then its stop position
    base: str             # folder that sample names are relative to
    extensions: tuple     # extension id -> member suffix
    format: str
    size_fn: str | None
    strict: bool
    output: OutputRules   # the input limits, and the transforms and size filter run on each sample read (picklable)
    duplicates: str | None = None         # --dedup: the mask of positions to leave out (dedup_pass.py)

    def sample_at(self, position: int) -> str:
        """The sample at `position` of the pack order, for messages (the executor names a dead worker's sample)."""
        rows = read_rows(self.table, position, position + 1)
        primary_file = rows.names[0].split("\0", 1)[0]
        return f"sample {rows.keys[0]!r} of {printable(primary_file)}"


def write_shard(task: ShardTask) -> ShardDone:
    """Read, probe and encode the samples of `task` in order, write them as one shard; unreadable or
    corrupt files are skipped (listed in the result), or fail the task under `strict`."""
    encoder = _BlockEncoder(task)
    shard = ShardFile(encoder.fmt, task.path)
    try:
        with naming(task.path):
            for first, stop, block_starts in _row_groups(task.blocks):
                rows = read_rows(task.table, first, stop)
                for block_first, block_stop in zip(block_starts, block_starts[1:]):
                    encoder.encode(rows, block_first, block_stop, shard)
                executors.report(stop - first, encoder.reported_bytes())
            done = ShardDone(task.shard, shard.size + len(encoder.fmt.TRAILER), len(encoder.columns["offset"]),
                             encoder.payload_bytes, tuple(encoder.skipped), tuple(encoder.names.bits),
                             tuple(encoder.names.extensions), encoder.max_fields)
            return shard.finish(done, task.record, encoder.columns)
    except BaseException:
        shard.abort()
        raise


def _row_groups(blocks: tuple):
    """(first, stop, block starts within) per run of whole blocks of at most ROWS_AT_ONCE rows (or one block)."""
    start = 0
    while start < len(blocks) - 1:
        end = start + 1
        while end < len(blocks) - 1 and blocks[end + 1] - blocks[start] <= ROWS_AT_ONCE:
            end += 1
        yield blocks[start], blocks[end], blocks[start:end + 1]
        start = end


class _BlockEncoder:
    """Turns blocks of table rows into shard bytes, collecting the per-sample columns of the record."""

    def __init__(self, task: ShardTask):
        self.task, self.fmt = task, get_format(task.format)
        self.checksum = checksum_function(DEFAULT_CHECKSUM)
        self.size_fn = load_function(task.size_fn, "--size-fn") if task.size_fn else None
        self.columns = {name: array.array("Q" if name == "fields" else "q") for name in SAMPLE_FIELDS}
        self._appends = tuple(column.append for column in self.columns.values())
        self.skipped, self.payload_bytes, self._reported = [], 0, 0
        self.names, self.max_fields = TaskNames(), 0
        self.duplicates = duplicate_mask(task.duplicates, task.blocks[0], task.blocks[-1])
        self.mark = executors.sample_marker()

    def encode(self, rows, first: int, stop: int, shard: ShardFile) -> None:
        """Encode the samples of positions [first, stop), one block, and append their records to `shard` WRITE_BYTES
        at a time: a block's records are never all held (a --map may make them far larger than the files read)."""
        lo, hi = first - rows.first, stop - rows.first
        columns = (rows.kind[lo:hi].tolist(), rows.ext[lo:hi].tolist(), rows.label[lo:hi].tolist(), rows.names[lo:hi],
                   rows.keys[lo:hi])
        parts, waiting, crc, mark = [], 0, 0, self.mark
        for position, kind, ext, label, joined, key in zip(range(first, stop), *columns):
            mark(position)
            names = joined.split("\0")  # the sample's files, primary first
            sample = self._sample(position, kind, self.task.extensions[ext], label, key, names)
            if sample is None:
                continue
            primary, kind, payload, size, extra, masks = sample
            record, data_offset = self.fmt.encode(key, primary, payload, label, size, extra)
            length = 0
            for part in record:
                crc = self.checksum(part, crc)
                length += len(part)
            self._add(position, shard.size + waiting, length, data_offset, len(payload), size, crc, kind, masks)
            parts += record
            waiting += length
            self.payload_bytes += len(payload) + sum(len(value) for _, value in extra)
            if waiting >= WRITE_BYTES:
                shard.write(parts, waiting)
                parts, waiting = [], 0
        if parts:
            shard.write(parts, waiting)

    def _add(self, position: int, at: int, length: int, data_offset: int, nbytes: int, size: int, crc: int,
             kind: int, masks: tuple) -> None:
        """Append one written sample's values to the record's columns (records.SAMPLE_FIELDS, in their order)."""
        for append, value in zip(self._appends, (position, at, length, at + data_offset, nbytes, size, crc, kind,
                                                 masks[1], masks[0])):
            append(value)

    def _sample(self, position: int, kind_id: int, primary: str, label: int, key: str, names: list):
        """(primary field, kind id, its bytes, size, [(field, bytes)] of the others, (field mask, ext id)) of the
        sample at `position` (of kind `kind_id`) as it is to be written, or None when it is skipped (recorded)."""
        if self.duplicates is not None and self.duplicates[position - self.task.blocks[0]]:
            self.skipped.append({"path": printable(names[0]), "reason": DUPLICATE_REASON})
            self._lost(names, 0)
            return None
        prefix = self.task.base + "/"
        paths = [name if name.startswith("/") else prefix + name for name in names]  # os.path.join, cheaper
        kind = KINDS[kind_id]
        payload, size, extra = self._read_sample(paths, kind, names)
        if payload is not None and self.task.output:  # only then may the kind change: looked up again
            primary, kind, payload, size, extra = self._transform(key, label, {primary: payload, **dict(extra)},
                                                                  kind, size, names)
            kind_id = kind_id if payload is None else KINDS.index(kind)
        if payload is None or (masks := self._masks(key, primary, extra, names)) is None:
            return None
        return primary, kind_id, payload, size, extra, masks

    def _read_sample(self, paths: list, kind: str, names: list) -> tuple:
        """(primary bytes, its size, [(field, bytes)] of the other fields), or (None, None, None) when one of its
        files is skipped: the whole sample is, each of its other files recorded as skipped with it."""
        values = []
        for at, (path, name) in enumerate(zip(paths, names)):
            payload, size = self._read(path, kind if at == 0 else None, name)
            if payload is None:
                self._lost(names, at)
                return None, None, None
            values.append((payload, size))
        return values[0][0], values[0][1], [(field_name(name), payload) for name, (payload, _) in
                                            zip(names[1:], values[1:])]

    def _lost(self, names: list, at: int) -> None:
        """Record the files of a skipped sample other than names[at], the one whose skip is recorded already."""
        for other in names[:at] + names[at + 1:]:
            self.skipped.append({"path": printable(other), "reason": f"its sample lost {printable(names[at])}"})

    def _transform(self, key: str, label: int, fields: dict, kind: str, size: int, names: list) -> tuple:
        """(primary field, kind, its bytes, final size, other fields) of the sample of `fields` (primary first) after
        the transforms and the size filter (`OutputRules`), or Nones when it is skipped: recorded against its primary
        file, and a BadInput is fatal under strict."""
        primary = next(iter(fields))
        try:
            result = self.task.output.apply(PackSample(key, label, fields), primary, kind, size, names[0])
        except BadInput as exc:
            if self.task.strict:
                raise PackError(f"{printable(names[0])}: {exc}") from None
            result = Drop(key, str(exc))
        if isinstance(result, Drop):
            self.skipped.append({"path": printable(names[0]), "reason": result.reason})
            self._lost(names, 0)
            return None, None, None, None, None
        primary, kind, fields, size = result
        extra = [(name, value) for name, value in fields.items() if name != primary]
        return primary, kind, fields[primary], size, extra

    def _masks(self, key: str, primary: str, extra: list, names: list):
        """(field mask, ext id) of a sample in this task's numbering, or None when it is skipped (over 64 fields)."""
        try:
            mask = self.names.mask([primary, *(name for name, _ in extra)], key)
        except BadInput as exc:
            if self.task.strict:
                raise PackError(f"{printable(names[0])}: {exc}") from None
            self.skipped.append({"path": printable(names[0]), "reason": str(exc)})
            self._lost(names, 0)
            return None
        self.max_fields = max(self.max_fields, len(extra) + 1)
        return mask, self.names.ext(primary)

    def _read(self, path: str, kind: str | None, name: str) -> tuple:
        """(file bytes, size: None without a `kind` to probe), or (None, None) for a file that is skipped."""
        try:
            payload = read_regular_file(path, self.task.output.max_sample_bytes)
            if kind is None:
                return payload, None
            return payload, probe_size(kind, path, payload, self.size_fn, self.task.output.max_pixels)
        except BadInput as exc:
            reason = str(exc)
        except OSError as exc:
            reason = f"unreadable: {exc.strerror or exc}"
        if self.task.strict:
            raise PackError(f"{printable(path)}: {reason}")
        self.skipped.append({"path": printable(name), "reason": reason})
        return None, None

    def reported_bytes(self) -> int:
        """Payload bytes since the last call (for the progress display)."""
        new, self._reported = self.payload_bytes - self._reported, self.payload_bytes
        return new

"""A folder or listing SOURCE as units: each planned shard's run of the pack-order table, its files read in a task.

The walk, the pure plan and the table (planning.py) decide which files make which sample, its
primary field and kind, and which samples make each shard and block; a `FolderShard` is one
planned shard: a few numbers and paths, however many samples it holds.  Its reader reads each
sample's files (``--max-sample-bytes``, regular files only), probes the primary field's size
(``--size-fn``, ``--max-pixels``) and hands the sample on; a file it cannot read is skipped
with the rest of its sample (one skip record a file), or fails the task under strict.
"""
from __future__ import annotations

from dataclasses import dataclass

from corgi_io.errors import BadInput, PackError
from corgi_io.manifest import KINDS
from corgi_io.packing.regular_files import read_regular_file
from corgi_io.packing.shard_writer import PlannedBlocks
from corgi_io.packing.sizing import probe_size
from corgi_io.packing.table import Table, read_rows
from corgi_io.packing.transforms.dedup import content_hash
from corgi_io.packing.user_code import load_function
from corgi_io.packing.walk import field_name, printable

ROWS_AT_ONCE = 4096  # table rows a task reads at a time


@dataclass(frozen=True)
class FolderShard:
    """Planned shard `shard` of a folder pack: positions blocks[0] to blocks[-1] of `table`, cut at `blocks`."""

    shard_file: str       # its file name in OUTPUT
    table: Table
    blocks: tuple         # the first position of each of its blocks, then its stop position
    base: str             # folder that sample names are relative to
    extensions: tuple     # extension id -> primary field name

    @property
    def name(self) -> str:
        """What a message calls the unit (an executor names a failed task by it)."""
        return f"{self.base} (samples {self.blocks[0]:,} to {self.blocks[-1] - 1:,} of the pack order)"

    @property
    def samples(self) -> int:
        """How many samples it reads (for the progress line's total)."""
        return self.blocks[-1] - self.blocks[0]

    def sample_at(self, index: int) -> str:
        """Its sample `index` (from 0), for messages (the executor names a dead worker's sample)."""
        rows = read_rows(self.table, self.blocks[0] + index, self.blocks[0] + index + 1)
        return f"sample {rows.keys[0]!r} of {printable(rows.names[0].split(chr(0), 1)[0])}"

    def shard_name(self, number: int, suffix: str) -> str:
        return self.shard_file

    def layout(self, options, fmt) -> tuple:
        """(block cuts, shard limit): the plan's blocks, one shard."""
        return PlannedBlocks(tuple(start - self.blocks[0] for start in self.blocks[:-1])), None

    def reader(self, options, strict: bool, skipped: list) -> "FolderReader":
        return FolderReader(self, options, strict, skipped)

    def digests(self, options):
        """The digest of each sample's primary file, in order (None for one that cannot be read): --dedup's hash."""
        for joined, _ in _rows(self):
            name = joined.split("\0", 1)[0]
            try:
                yield content_hash(read_regular_file(self._path(name), options.max_sample_bytes))
            except (OSError, BadInput):
                yield None

    def _path(self, name: str) -> str:
        return name if name.startswith("/") else f"{self.base}/{name}"


@dataclass(frozen=True)
class PlannedShards:
    """The planned shards of a folder pack (`plan`, staged) as a sequence of units, each made when asked for: the
    driver holds no Python object per block."""

    plan: object
    table: Table
    base: str
    extensions: tuple

    def __len__(self) -> int:
        return self.plan.num_shards

    def __getitem__(self, shard: int) -> FolderShard:
        if not 0 <= shard < len(self):
            raise IndexError(shard)
        return FolderShard(self.plan.shard_name(shard), self.table, self.plan.shard_blocks(shard), self.base,
                           self.extensions)

    def __iter__(self):
        return (self[shard] for shard in range(len(self)))


def _rows(unit: FolderShard, columns: bool = False):
    """(names, key) of each of its rows, or (kind, ext, label, names, key) with `columns`, ROWS_AT_ONCE at a time."""
    for first in range(unit.blocks[0], unit.blocks[-1], ROWS_AT_ONCE):
        rows = read_rows(unit.table, first, min(first + ROWS_AT_ONCE, unit.blocks[-1]))
        if columns:
            yield from zip(rows.kind.tolist(), rows.ext.tolist(), rows.label.tolist(), rows.names, rows.keys)
        else:
            yield from zip(rows.names, rows.keys)


class FolderReader:
    """Reads a `FolderShard`'s samples for its write task; skips go to `skipped`, one record a file."""

    def __init__(self, unit: FolderShard, options, strict: bool, skipped: list):
        self.unit, self.strict, self.skipped = unit, strict, skipped
        self.most, self.max_pixels = options.max_sample_bytes, options.max_pixels
        self.size_fn = load_function(options.size_fn, "--size-fn") if options.size_fn else None
        self.prefix = unit.base + "/"

    def items(self):
        """(kind id, ext id, label, [file names, primary first], key) of each sample, in pack order."""
        for kind, ext, label, joined, key in _rows(self.unit, columns=True):
            yield kind, ext, label, joined.split("\0"), key

    def prepare(self, item) -> tuple | None:
        """(key, label, primary, kind, size, fields, []) of a sample read, or None when a file is skipped."""
        kind_id, ext, label, names, key = item
        kind, fields = KINDS[kind_id], {}
        for at, name in enumerate(names):
            path = name if name.startswith("/") else self.prefix + name  # os.path.join, cheaper
            try:
                payload = read_regular_file(path, self.most)
                size = probe_size(kind, path, payload, self.size_fn, self.max_pixels) if at == 0 else None
            except (BadInput, OSError) as exc:
                return self._unreadable(names, at, path, exc)
            if at == 0:
                primary, primary_size = self.unit.extensions[ext], size
                fields[primary] = payload
            else:
                fields[field_name(name)] = payload
        return key, label, primary, kind, primary_size, fields, ()

    def _unreadable(self, names: list, at: int, path: str, exc: Exception) -> None:
        """Skip the sample of file names[at] that could not be read (PackError under strict)."""
        reason = str(exc) if isinstance(exc, BadInput) else f"unreadable: {exc.strerror or exc}"
        if self.strict:
            raise PackError(f"{printable(path)}: {reason}")
        self.skipped.append({"path": printable(names[at]), "reason": reason})
        self._lost(names, at)

    def skip(self, item, reason: str) -> None:
        """Record the skip of the sample `item`: against its primary file, and each other file as lost with it."""
        names = item[3]
        self.skipped.append({"path": printable(names[0]), "reason": reason})
        self._lost(names, 0)

    def _lost(self, names: list, at: int) -> None:
        for other in names[:at] + names[at + 1:]:
            self.skipped.append({"path": printable(other), "reason": f"its sample lost {printable(names[at])}"})

    def where(self, item) -> str:
        """What an error names for the sample `item`: its primary file."""
        return printable(item[3][0])

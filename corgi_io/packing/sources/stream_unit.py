"""A unit of existing shards or tables as a write task reads it: its samples streamed, through the input rules.

A `StreamUnit` is one `Unit` (a tar, a TFRecord file, a Parquet row group, a JSONL file) and the
options of its form's reader.  Its reader streams the unit's `PackSample`s in order and puts each
through `SampleRules` (--require, the primary field and its kind, reserved names, byte and pixel
bounds); the unit's blocks are cut as they fill and its shards are ``shard-<unit>-<n><suffix>``.
A skip is recorded against ``<file>: <key>``, a reader's skip (a bad member, record or row)
against the file, the file named relative to SOURCE (`unit_list.units_base`), as a folder's files are.
"""
from __future__ import annotations

from dataclasses import dataclass

from corgi_io.packing.sample_rules import SampleRules
from corgi_io.packing.shard_writer import GreedyBlocks
from corgi_io.packing.sources.unit_list import Unit, read_unit, relative_name
from corgi_io.packing.transforms.dedup import content_hash


@dataclass(frozen=True)
class StreamUnit:
    """Unit `index` of SOURCE's units: `unit`, read with `read_options` (what its form's reader takes)."""

    index: int
    unit: Unit
    read_options: dict
    base: str = ""  # the folder its skip records name its file relative to (unit_list.units_base)

    @property
    def name(self) -> str:
        """What a message calls the unit: its file (and row group)."""
        return self.unit.name

    @property
    def samples(self) -> None:
        """How many samples it holds: not known before it is read."""
        return None

    def sample_at(self, index: int) -> str:
        """Its sample `index` of the stream (from 0), for messages: by number, since its key would mean reading the
        unit again, in the driver."""
        return f"sample #{index} of {self.name}"

    def shard_name(self, number: int, suffix: str) -> str:
        """The file name of its shard `number`: ``shard-000012-0003.tar``."""
        return f"shard-{self.index:06d}-{number:04d}{suffix}"

    def layout(self, options, fmt) -> tuple:
        """(block cuts, shard limit): blocks and shards cut as they fill."""
        return (GreedyBlocks(options.block_bytes, options.block_samples),
                max(1, options.shard_bytes - len(fmt.TRAILER)))

    def reader(self, options, strict: bool, skipped: list) -> "StreamReader":
        return StreamReader(self, options, strict, skipped)

    def digests(self, options):
        """The digest of each sample's primary field in stream order (None: no primary by the rules): --dedup's hash."""
        rules = SampleRules(options)
        for sample in read_unit(self.unit, strict=False, on_skip=lambda message: None, **self.read_options):
            primary = rules.primary_field(sample)
            yield content_hash(sample.fields[primary]) if primary is not None else None


class StreamReader:
    """Reads a `StreamUnit`'s samples for its write task; skips go to `skipped`."""

    def __init__(self, unit: StreamUnit, options, strict: bool, skipped: list):
        self.unit, self.strict, self.skipped = unit, strict, skipped
        self.rules, self.path, self.name = SampleRules(options), unit.unit.path, relative_name(unit.unit.path, unit.base)

    def items(self):
        """The unit's PackSamples, in its order (a reader's bad input under strict: BadInput)."""
        return read_unit(self.unit.unit, strict=self.strict, on_skip=self._reader_skipped, **self.unit.read_options)

    def _reader_skipped(self, message: str) -> None:
        """A reader's skip: recorded against the unit's file (named once: the message may begin with it too)."""
        self.skipped.append({"path": self.name,
                             "reason": message.removeprefix("skipped ").removeprefix(f"{self.path}: ")})

    def prepare(self, sample):
        """(key, label, primary, kind, size, fields, [{"reason"}] of fields left out) of a sample the input rules
        admit, or None (its skip recorded); BadInput for a bad one."""
        admitted = self.rules.admit(sample)
        if isinstance(admitted, dict):
            return self.skip(sample, admitted["reason"])
        primary, kind, size, fields, dropped = admitted
        return sample.key, sample.label, primary, kind, size, fields, dropped

    def skip(self, sample, reason: str) -> None:
        """Record the skip of `sample` (or of one of its fields, which leaves it packed)."""
        self.skipped.append({"path": f"{self.name}: {sample.key}", "reason": reason})

    def where(self, sample) -> str:
        """What an error names for `sample`: its file and key."""
        return f"{self.path}: sample {sample.key!r}"

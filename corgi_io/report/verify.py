"""`corgi verify`: prove that a pack's shards hold exactly the bytes its manifest describes.

Each shard is checked on its own, so `jobs` processes can share the work: its size (and
a tar shard's end-of-archive marker), then every block, read with one ranged read.  Each
record's checksum (the manifest's function: CRC32C, or zlib CRC32 in version-1 packs) is
recomputed, and (version 6 on) each field's own checksum, so a changed record names the fields
whose bytes changed; a block whose records are all intact is then parsed with the format's own
parser (tar headers, or TFRecord CRC32C framing) and compared field by field with the
manifest, each field's framing and payload range included.  A TFRecord shard's ``.index`` sidecar must list the manifest's offsets and lengths.
With `max_pixels`, each image sample whose recorded size (w*h, from its header at pack time) is
above it is a problem too: packs made before `corgi pack --max-pixels`, or with a higher limit.

Damage is reported, never raised, and the check goes on with the next block and shard:
each sample whose bytes changed, each block whose framing disagrees, each shard of the
wrong size and each bad sidecar is one problem.  A missing or truncated shard is one
problem: its blocks past the end are not read.  All problems are counted; the first
`max_errors` are listed, in shard and offset order whatever `jobs` is.
"""
from __future__ import annotations

import collections
import contextlib
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm import tqdm

from corgi_io.manifest.checksum import checksum_function, mismatched_records
from corgi_io.errors import FormatError, StorageError
from corgi_io.formats import get_format
from corgi_io.manifest import KINDS, open_manifest
from corgi_io.processes import worker_pool
from corgi_io.storage import open_storage


@dataclass(frozen=True)
class Problem:
    """One thing found wrong: the file (a shard or its sidecar), the byte offset in it, what, and the sample's key."""

    shard: str
    offset: int
    message: str
    key: str | None = None

    def __str__(self):
        return f"{self.shard}: byte offset {self.offset}: {self.message}"


@dataclass
class VerifyReport:
    """What `verify` found: samples whose blocks were read and checked, every problem counted, the first listed."""

    samples_checked: int = 0
    total_problems: int = 0
    problems: list = field(default_factory=list)  # the first `max_errors` Problems, in shard and offset order
    max_errors: int = 20

    @property
    def ok(self) -> bool:
        return self.total_problems == 0

    def add(self, *problems: Problem) -> None:
        """Count `problems`, and list them while fewer than `max_errors` are listed."""
        self.total_problems += len(problems)
        self.problems.extend(problems[:max(0, self.max_errors - len(self.problems))])

    def merge(self, later: VerifyReport) -> None:
        """Append the report of a later shard."""
        self.samples_checked += later.samples_checked
        self.total_problems += later.total_problems
        self.problems.extend(later.problems[:max(0, self.max_errors - len(self.problems))])

    def as_dict(self) -> dict:
        """The report as plain JSON-ready values (what `corgi verify --json` prints)."""
        return {"ok": self.ok, "samples_checked": self.samples_checked, "total_problems": self.total_problems,
                "problems": [asdict(p) for p in self.problems]}


def verify(dataset, progress: bool | None = None, max_errors: int = 20, jobs: int = 1,
           storage_options: dict | None = None, max_pixels: int | None = None) -> VerifyReport:
    """Check every shard of `dataset` against its manifest; returns a VerifyReport (never raises for damage).

    `jobs` > 1 checks shards in that many processes; the report is the same as with one.
    `max_pixels`: also report each image sample recorded with more pixels (None: sizes are not checked).
    A malformed manifest (its skip records included) raises ManifestError.  `progress`: a tqdm bar (None: when on
    a terminal).
    """
    m = open_manifest(dataset, storage_options)
    m.validate_rows()  # every per-sample row: opening a pack checks only its block and shard tables
    m.check_row_groups()  # what remote readers read (columns/rows.bin) equals what local ones map
    collections.deque(m.skip_records(), maxlen=0)  # every skip record, a line at a time, against the head's counts
    report = VerifyReport(max_errors=max_errors)
    with _shard_reports(m, jobs, max_errors, storage_options, max_pixels) as reports, \
            tqdm(total=sum(sh.bytes for sh in m.shards), unit="B", unit_scale=True, desc="verify",
                 disable=None if progress is None else not progress) as bar:
        for shard, shard_report in zip(m.shards, reports):
            report.merge(shard_report)
            bar.update(shard.bytes)
    return report


@contextlib.contextmanager
def _shard_reports(m, jobs: int, max_errors: int, storage_options, max_pixels):
    """An iterator over each shard's VerifyReport in shard order, computed here or in `jobs` processes."""
    if jobs <= 1 or len(m.shards) <= 1:
        checker = _ShardChecker(m, max_errors, storage_options, max_pixels)
        try:
            yield map(checker.check, range(len(m.shards)))
        finally:
            checker.storage.close()
        return
    pool = worker_pool(min(jobs, len(m.shards)), _start_worker, (m.root, max_errors, storage_options, max_pixels))
    try:
        yield pool.map(_check_in_worker, range(len(m.shards)))
    finally:
        pool.shutdown(cancel_futures=True)


_worker_checker = None  # the _ShardChecker of a worker process


def _start_worker(root: str, max_errors: int, storage_options, max_pixels) -> None:
    global _worker_checker
    _worker_checker = _ShardChecker(open_manifest(root, storage_options), max_errors, storage_options, max_pixels)


def _check_in_worker(shard_index: int) -> VerifyReport:
    return _worker_checker.check(shard_index)


class _ShardChecker:
    """Checks one shard at a time against an opened manifest, through one Storage."""

    def __init__(self, m, max_errors: int = 20, storage_options: dict | None = None, max_pixels: int | None = None):
        self.m, self.fmt, self.max_errors, self.max_pixels = m, get_format(m.format), max_errors, max_pixels
        self.storage = open_storage(m.root, **(storage_options or {}))
        # blocks lie in shard order (the manifest checks it): shard k's blocks are [bounds[k], bounds[k + 1])
        self.block_bounds = np.searchsorted(m.blocks.shard, np.arange(len(m.shards) + 1)).tolist()

    def check(self, k: int) -> VerifyReport:
        """The report of shard `k`: its size, every block that lies within the file, and its sidecar."""
        shard, b = self.m.shards[k], self.m.blocks
        report = VerifyReport(max_errors=self.max_errors)
        readable = self._check_size(shard, report)
        rows = slice(self.block_bounds[k], self.block_bounds[k + 1])
        for first, count, offset, length in zip(b.first[rows].tolist(), b.count[rows].tolist(),
                                                b.offset[rows].tolist(), b.length[rows].tolist()):
            problems = self._oversized_images(shard.path, first, count)
            if offset + length <= readable:  # past the end of a truncated or missing shard: that is already one problem
                try:
                    data = self.storage.read_range(shard.path, offset, length)
                except OSError as exc:
                    problems.append(Problem(shard.path, offset, f"cannot read block: {exc}"))
                else:
                    report.samples_checked += count
                    problems += self._check_block(shard.path, data, first, count, offset)
            report.add(*sorted(problems, key=lambda problem: problem.offset))
        if getattr(self.fmt, "INDEX_SUFFIX", None):
            report.add(*self._check_index(shard))
        return report

    def _check_size(self, shard, report: VerifyReport) -> int:
        """Check the shard's size and end-of-archive marker; returns how many of its bytes can be read."""
        try:
            actual = self.storage.size(shard.path)
        except FileNotFoundError:
            report.add(Problem(shard.path, 0, "shard file is missing"))
            return 0
        except StorageError:
            raise  # the storage cannot be reached (after its retry budget): no verdict on the pack, stop here
        except OSError as exc:
            report.add(Problem(shard.path, 0, f"cannot stat shard: {exc}"))
            return 0
        if actual != shard.bytes:
            kind = "truncated" if actual < shard.bytes else "extra bytes"
            report.add(Problem(shard.path, min(actual, shard.bytes),
                               f"shard is {actual} bytes, manifest says {shard.bytes} ({kind})"))
        trailer = self.fmt.TRAILER
        if trailer and actual >= shard.bytes:
            where = shard.bytes - len(trailer)
            try:
                intact = self.storage.read_range(shard.path, where, len(trailer)) == trailer
            except OSError as exc:
                report.add(Problem(shard.path, where, f"cannot read end-of-archive marker: {exc}"))
            else:
                if not intact:
                    report.add(Problem(shard.path, where, "end-of-archive marker is damaged"))
        return min(actual, shard.bytes)

    def _oversized_images(self, path: str, first: int, count: int) -> list:
        """A problem per image sample of rows [first, first + count) recorded with more than `max_pixels` pixels."""
        if self.max_pixels is None:
            return []
        s, rows = self.m.samples, slice(first, first + count)
        sizes = s.size[rows]
        problems = []
        for i in np.flatnonzero((s.kind[rows] == KINDS.index("image")) & (sizes > self.max_pixels)).tolist():
            key = self.m.key(first + i)
            problems.append(Problem(path, int(s.offset[first + i]), f"sample {key!r}: image of {int(sizes[i]):,} "
                                    f"pixels, above the limit of {self.max_pixels:,} (--max-pixels)", key))
        return problems

    def _check_block(self, path: str, data: bytes, first: int, count: int, base: int) -> list:
        """Each record of one block whose checksum differs, by the fields whose bytes changed where the pack
        records them; if none, the fields whose checksum differs and the block's framing disagreements."""
        s, stop = self.m.samples, first + count
        offsets, lengths, sums = (column[first:stop].tolist() for column in (s.offset, s.length, s.checksum))
        changed = mismatched_records(self.m.checksum, data, offsets, lengths, sums)
        keys = self.m.keys(first, stop)
        ranges = self.m.field_ranges(first, stop) if self.m.has_field_ranges else None
        fields = self._changed_fields(path, data, base, (keys, offsets), first, ranges)
        if changed:
            return [problem for i in changed for problem in fields.get(i) or [
                Problem(path, offsets[i], f"sample {keys[i]!r}: {self.m.checksum} mismatch (record bytes changed)",
                        keys[i])]]
        return [problem for found in fields.values() for problem in found] + \
            self._check_framing(path, data, base, keys, first, ranges)

    def _changed_fields(self, path: str, data: bytes, base: int, records: tuple, first: int, ranges) -> dict:
        """{sample's place in the block: [a Problem per field whose payload fails its own checksum]} (version 6);
        `records` are the block's (keys, record offsets): a problem is at its record, naming the field's bytes."""
        if ranges is None:
            return {}
        (keys, starts), checksum, view, found = records, checksum_function(self.m.checksum), memoryview(data), {}
        for sample, field, offset, length, crc in zip(*(column.tolist() for column in (
                ranges.sample, ranges.field, ranges.offset, ranges.length, ranges.crc))):
            if checksum(view[offset - base:offset - base + length]) != crc:
                i = sample - first
                found.setdefault(i, []).append(Problem(
                    path, starts[i], f"sample {keys[i]!r}: field {self.m.fields[field]!r} (its {length} bytes at byte "
                    f"offset {offset}): {self.m.checksum} mismatch (field bytes changed)", keys[i]))
        return found

    def _check_framing(self, path: str, data: bytes, base: int, keys: list, first: int, ranges) -> list:
        """Parse the block with the format's parser; each record must match its manifest row field by field."""
        try:
            records = list(self.fmt.parse_block(data, base))
        except FormatError as exc:
            return [Problem(path, exc.offset, str(exc).split(": ", 1)[1])]
        if len(records) != len(keys):
            return [Problem(path, base, f"block holds {len(records)} samples, manifest says {len(keys)}")]
        s, rows = self.m.samples, slice(first, first + len(keys))
        problems = []
        for record, expected in zip(records, zip(keys, s.label[rows].tolist(), s.offset[rows].tolist(),
                                                 s.length[rows].tolist(), s.data_offset[rows].tolist(),
                                                 s.bytes[rows].tolist())):
            actual = (record.key, record.label, record.offset, record.length, record.data_offset, len(record.data))
            if actual != expected:
                problems.append(Problem(path, record.offset, f"sample {expected[0]!r}: shard has (key, label, offset, "
                                        f"length, data offset, bytes) {actual}, manifest says {expected}", expected[0]))
        return problems + self._check_fields(path, records, first) + self._check_spans(path, records, first, ranges)

    def _check_spans(self, path: str, records: list, first: int, ranges) -> list:
        """Each record's fields must lie where the manifest's field rows say: name, framing, payload (version 6)."""
        if ranges is None:
            return []
        bounds = np.searchsorted(ranges.sample, np.arange(first, first + len(records) + 1)).tolist()
        rows = list(zip([self.m.fields[i] for i in ranges.field.tolist()], ranges.header.tolist(),
                        ranges.offset.tolist(), ranges.length.tolist()))
        problems = []
        for record, a, z in zip(records, bounds[:-1], bounds[1:]):
            held = [tuple(span) for span in record.spans]
            if held != rows[a:z]:
                problems.append(Problem(path, record.offset, f"sample {record.key!r}: shard has fields (name, header, "
                                        f"offset, length) {held}, manifest says {rows[a:z]}", record.key))
        return problems

    def _check_fields(self, path: str, records: list, first: int) -> list:
        """Each record's field names must be the ones its manifest mask lists (version 3 packs: `sample_fields`)."""
        if "fields" not in self.m.samples.arrays:
            return []
        problems = []
        for record, mask in zip(records, self.m.samples.fields[first:first + len(records)].tolist()):
            listed = sorted(name for bit, name in enumerate(self.m.fields) if mask >> bit & 1)
            held = sorted(name for name, _ in record.fields)
            if held != listed:
                problems.append(Problem(path, record.offset, f"sample {record.key!r}: shard has fields {held}, "
                                        f"manifest says {listed}", record.key))
        return problems

    def _check_index(self, shard) -> list:
        """The shard's index sidecar must list exactly the manifest's (offset, length) of its records."""
        path = shard.path + self.fmt.INDEX_SUFFIX
        try:
            data, listed = self._read_index(path, shard.samples)
        except FormatError as exc:
            return [Problem(path, exc.offset, f"index sidecar: {str(exc).split(': ', 1)[1]}")]
        rows = slice(shard.first_sample, shard.first_sample + shard.samples)
        expected = np.stack([self.m.samples.offset[rows], self.m.samples.length[rows]], axis=1)
        if len(listed) != len(expected):
            return [Problem(path, _line_start(data, min(len(listed), len(expected))),
                            f"index sidecar lists {len(listed)} records, the shard has {len(expected)}")]
        wrong = np.flatnonzero(np.any(listed != expected, axis=1))
        if len(wrong):
            i = int(wrong[0])
            return [Problem(path, _line_start(data, i), f"index sidecar line {i + 1} says offset {listed[i, 0]} "
                            f"length {listed[i, 1]}, manifest says offset {expected[i, 0]} length {expected[i, 1]}")]
        return []

    def _read_index(self, path: str, records: int) -> tuple:
        """(bytes, parsed rows) of a sidecar; FormatError (offset in the sidecar) if missing, oversized or malformed."""
        try:
            size = self.storage.size(path)
            if size > records * self.fmt.INDEX_LINE_BYTES:
                raise FormatError(0, f"{size} bytes, more than an index of {records} records can hold")
            data = self.storage.read_range(path, 0, size)
        except FileNotFoundError:
            raise FormatError(0, "missing") from None
        except OSError as exc:
            raise FormatError(0, f"cannot read ({exc})") from None
        return data, self.fmt.parse_index(data)


def _line_start(data: bytes, line: int) -> int:
    """Byte offset at which line number `line` (from 0) of `data` starts (len(data) past the last line)."""
    return sum(len(text) + 1 for text in data.split(b"\n")[:line])

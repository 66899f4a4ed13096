"""`corgi verify`: prove that a pack's shards hold exactly the bytes its manifest describes.

Each shard's length is checked, every block is read with one ranged read, every record's
CRC32 (kept in the manifest) is recomputed, and the block is parsed with the format's own
parser (tar headers, or TFRecord CRC32C framing) and compared field by field with the
manifest.  The first problem is reported with its shard and absolute byte offset.
"""
from __future__ import annotations

from dataclasses import dataclass

from tqdm import tqdm

from corgi_io.checksum import checksum_function
from corgi_io.errors import FormatError, StorageError
from corgi_io.formats import get_format
from corgi_io.manifest import open_manifest
from corgi_io.storage import open_storage


@dataclass(frozen=True)
class Problem:
    """The first thing found wrong: which shard, where, and what."""

    shard: str
    offset: int
    message: str

    def __str__(self):
        return f"{self.shard}: byte offset {self.offset}: {self.message}"


def verify(dataset, progress: bool | None = None):
    """Check every shard of `dataset`; returns (checked sample count, first Problem or None)."""
    m = open_manifest(dataset)
    fmt = get_format(m.format)
    b = m.blocks
    with open_storage(m.root) as storage, tqdm(total=int(sum(sh.bytes for sh in m.shards)), unit="B",
                                                unit_scale=True, desc="verify",
                                                disable=None if progress is None else not progress) as bar:
        for shard in m.shards:
            problem = _check_shard_length(storage, shard, fmt)
            if problem:
                return 0, problem
        for block in range(len(b)):
            shard = m.shards[b.shard[block]]
            first, count, offset = int(b.first[block]), int(b.count[block]), int(b.offset[block])
            try:
                data = storage.read_range(shard.path, offset, int(b.length[block]))
            except StorageError as exc:
                return first, Problem(shard.path, offset, str(exc))
            problem = _check_block(m, fmt, shard.path, data, first, count, offset)
            if problem:
                return first, problem
            bar.update(len(data))
    return m.num_samples, None


def _check_shard_length(storage, shard, fmt):
    if not storage.exists(shard.path):
        return Problem(shard.path, 0, "shard file is missing")
    actual = storage.size(shard.path)
    if actual != shard.bytes:
        return Problem(shard.path, min(actual, shard.bytes),
                       f"shard is {actual} bytes, manifest says {shard.bytes} ({'truncated' if actual < shard.bytes else 'extra bytes'})")
    if fmt.TRAILER:
        tail = storage.read_range(shard.path, shard.bytes - len(fmt.TRAILER), len(fmt.TRAILER))
        if tail != fmt.TRAILER:
            return Problem(shard.path, shard.bytes - len(fmt.TRAILER), "end-of-archive marker is damaged")
    return None


def _check_block(m, fmt, path: str, data: bytes, first: int, count: int, base: int):
    s, checksum = m.samples, checksum_function(m.checksum)
    view = memoryview(data)
    for i in range(first, first + count):
        start = int(s.offset[i]) - base
        if checksum(view[start: start + int(s.length[i])]) != int(s.checksum[i]):
            return Problem(path, int(s.offset[i]), f"sample {m.key(i)!r}: {m.checksum} mismatch (record bytes changed)")
    try:
        records = list(fmt.parse_block(data, base))
    except FormatError as exc:
        return Problem(path, exc.offset, str(exc).split(": ", 1)[1])
    if len(records) != count:
        return Problem(path, base, f"block holds {len(records)} samples, manifest says {count}")
    for i, record in zip(range(first, first + count), records):
        expected = (m.key(i), int(s.label[i]), int(s.offset[i]), int(s.length[i]), int(s.data_offset[i]), int(s.bytes[i]))
        actual = (record.key, record.label, record.offset, record.length, record.data_offset, len(record.data))
        if actual != expected:
            return Problem(path, record.offset, f"sample {m.key(i)!r}: shard has (key, label, offset, length, "
                                                f"data offset, bytes) {actual}, manifest says {expected}")
    return None

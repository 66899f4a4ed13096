"""Exact deduplication: a 128-bit content hash per sample in the workers, a pure plan in the driver.

Worker side, `ExactDedup.digest(sample)`: the BLAKE2b-128 of the primary field's bytes, 16 bytes
sent back with the sample's record.  Driver side, `hashes_of(digests)` packs them into an (N, 2)
uint64 array in pack order, and `first_occurrences(hashes)` says which samples to keep: the first
of each group of equal hashes.  Deciding needs every hash, so a pipeline that writes shards in the
same tasks that read the samples hashes them before planning (with the size probe, on the source
bytes) and plans the shards over the kept ones.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from corgi_io.arguments import check_at_least
from corgi_io.errors import BadInput
from corgi_io.packing.sample import PackSample

DIGEST_BYTES = 16


def content_hash(data) -> bytes:
    """The BLAKE2b digest of `data` in 16 bytes (128 bits: a chance collision is out of reach at any corpus size)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


@dataclass(frozen=True)
class ExactDedup:
    """Hashes the primary field (`field` when the sample has it, else the default primary) for exact dedup."""

    name: ClassVar[str] = "dedup"
    field: str | None = None

    def options(self) -> dict:
        """The JSON-able options (the manifest records them; the hash is named so that it can change)."""
        return {"field": self.field, "hash": f"blake2b-{DIGEST_BYTES * 8}"}

    def digest(self, sample: PackSample) -> bytes:
        """The 16-byte content hash of the sample's primary field; BadInput if it has none."""
        name = sample.primary(self.field)
        if name is None:
            raise BadInput(f"sample {sample.key!r} has no primary field to hash (fields {tuple(sample.fields)})")
        return content_hash(sample.fields[name])


def hashes_of(digests) -> np.ndarray:
    """The 16-byte digests, in order, as an (N, 2) uint64 array (each digest's two little-endian halves)."""
    return np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)


def first_occurrences(hashes: np.ndarray) -> np.ndarray:
    """The bool mask of the samples to keep: the first (lowest index) of each group of equal rows of `hashes`.

    `hashes`: (N, 2) uint64, the samples in pack order.  O(N log N): a stable argsort of the first
    column, then neighbours compared; only when some equal first halves have unequal second halves
    (a 64-bit collision: never by chance, only from crafted input) a stable lexsort of both columns
    replaces it.  Memory beside the input's 16 B a sample: the order (8 B), one sorted column at a
    time (8 B), the sort's scratch and two masks (2 B): measured, 10^7 samples take 1.8 s and 19 B a
    sample above the input (peak RSS), so 10^8 samples need about 3.5-4 GB, input included, and
    10^9 call for `first_occurrences_chunked`.  No Python object per sample.
    """
    hashes = np.asarray(hashes, dtype=np.uint64).reshape(-1, 2)
    order = np.argsort(hashes[:, 0], kind="stable")
    same_first, same_second = _same_as_previous(hashes[:, 0], order), _same_as_previous(hashes[:, 1], order)
    if np.any(same_first & ~same_second):
        order = np.lexsort((hashes[:, 1], hashes[:, 0]))  # stable: equal rows stay in pack order
        same_first, same_second = _same_as_previous(hashes[:, 0], order), _same_as_previous(hashes[:, 1], order)
    keep = np.ones(len(hashes), dtype=bool)
    keep[order[1:][same_first & same_second]] = False
    return keep


def first_occurrences_chunked(hashes: np.ndarray, partitions: int, chunk_rows: int = 1 << 22) -> np.ndarray:
    """`first_occurrences(hashes)` for more hashes than memory holds: `hashes` may be memory-mapped
    (``np.load(path, mmap_mode="r")``), read `chunk_rows` rows at a time.

    Equal rows share their first half, so they fall in the same partition (first half modulo
    `partitions`); each partition's rows, gathered in pack order, are planned in memory alone.  Memory:
    the mask (1 B a sample) and about 35 B a sample of one partition (N / `partitions` of them, for
    uniform hashes; measured, 8 B a sample in all with 8 partitions); the price is `partitions`
    reads of the input (16 GB for 10^9 samples each time).
    """
    check_at_least("partitions", partitions, 1, optional=False)
    check_at_least("chunk_rows", chunk_rows, 1, optional=False)
    hashes = hashes.reshape(-1, 2)
    keep = np.ones(len(hashes), dtype=bool)
    for partition in range(partitions):
        rows = _partition_rows(hashes, partitions, partition, chunk_rows)
        keep[rows] = first_occurrences(hashes[rows])
    return keep


def _partition_rows(hashes: np.ndarray, partitions: int, partition: int, chunk_rows: int) -> np.ndarray:
    """The row numbers, ascending, whose first half is `partition` modulo `partitions`, read a chunk at a time."""
    found = [np.zeros(0, dtype=np.int64)]
    for start in range(0, len(hashes), chunk_rows):
        first = hashes[start:start + chunk_rows, 0]
        found.append(np.flatnonzero(first % np.uint64(partitions) == partition) + start)
    return np.concatenate(found)


def _same_as_previous(column: np.ndarray, order: np.ndarray) -> np.ndarray:
    """For positions 1.. of `order`: whether `column` there equals it at the position before."""
    ordered = column[order]
    return ordered[1:] == ordered[:-1]

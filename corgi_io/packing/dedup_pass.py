"""``corgi pack --dedup``: a hashing pass over every sample before any shard is written, and the duplicates it finds.

Deciding which samples are duplicates needs every sample's hash, so it cannot happen in the same
tasks that write the shards.  The pass runs first, in the same executor: each task hashes the
primary field (BLAKE2b-128, `transforms.dedup.content_hash`) of one unit's samples in its order
(the unit's `digests`: a folder's planned shard reads each primary file, a unit of shards or
tables reads its samples and picks the primary field by the rules), and saves the
(n, 2) uint64 hashes to ``.corgi-partial/hash-<n>.npy``; a rerun keeps the files that exist.
The driver then copies them, in order, into one memory-mapped file and keeps the first of each group of equal
hashes (`first_occurrences_chunked`, in partitions of at most `PARTITION_ROWS` samples: bounded
memory at any size), and saves the mask of duplicates as ``duplicates.npy`` (one byte a sample).
The writing tasks skip the samples it marks, each with a skip record.

"First" is in pack order: the table's order for a folder or listing (the seeded shuffle, or the
input's order with ``--order keep``), the units' stream order for shards and tables.  The hash is
of the primary field as read, before ``--map`` and the other transforms.  A sample the pass cannot
read or give a primary field gets a hash of its own (`UNIQUE`), so that it never hides another.
"""
from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corgi_io.packing import executors
from corgi_io.packing.transforms.dedup import first_occurrences_chunked
from corgi_io.storage.atomic import atomic_output

UNIQUE = np.uint64(2 ** 64 - 1)  # first half of the hash of a sample that has none: (UNIQUE, its stream index)
PARTITION_ROWS = 1 << 23         # samples planned in memory at once (about 35 B each)


@dataclass(frozen=True)
class HashTask:
    """Hash the samples of one unit (a folder's planned shard, or a unit of shards or tables), in its order."""

    out: str           # the hash file it writes
    unit: object       # a FolderShard or a StreamUnit: its `digests(options)` are the hashes
    options: object    # the PackOptions (the input bounds, a source's primary field rule)

    @property
    def path(self) -> str:
        """What it reads, for messages (an executor names a failed task by it)."""
        return self.unit.name


@dataclass(frozen=True)
class HashDone:
    """What a hash task sends back: how many samples it hashed."""

    samples: int

    @property
    def progress(self) -> tuple:
        """(samples, bytes) for executors that cannot relay live reports."""
        return self.samples, 0


def hash_file(partial: Path, index: int) -> Path:
    return Path(partial) / f"hash-{index:06d}.npy"


def find_units_duplicates(executor, units: list, partial: Path, options, display) -> tuple:
    """(path of the duplicates mask, each unit's (first, stop) samples in it), from a hashing pass over every unit
    in order; (None, empty bounds) without --dedup.  A rerun keeps the hash files that exist."""
    if not options.dedup:
        return None, [(0, 0)] * len(units)
    tasks = [HashTask(str(hash_file(partial, index)), unit, options) for index, unit in enumerate(units)]
    display.phase("dedup", "sample")
    for _ in executor.run(hash_task, [task for task in tasks if not Path(task.out).exists()], display.advance):
        pass
    path, counts, _ = find_duplicates([task.out for task in tasks], partial)
    starts = [0, *itertools.accumulate(counts)]
    return path, list(zip(starts, starts[1:]))


def hash_task(task: HashTask) -> HashDone:
    """Write the task's hashes, one row per sample in order."""
    digests = task.unit.digests(task.options)
    none = struct.Struct("<QQ")
    hashes = np.frombuffer(b"".join(digest or none.pack(int(UNIQUE), index) for index, digest in enumerate(digests)),
                           dtype="<u8").reshape(-1, 2)
    with atomic_output(task.out) as f:
        np.save(f, hashes, allow_pickle=False)
    executors.report(len(hashes), 0)
    return HashDone(len(hashes))


def find_duplicates(hash_paths: list, partial: Path) -> tuple:
    """(path of the duplicates mask, samples in each hash file, duplicates found) over the hash files in order."""
    counts = [len(np.load(path, mmap_mode="r")) for path in hash_paths]
    total = sum(counts)
    joined = np.lib.format.open_memmap(Path(partial) / "hashes.npy", mode="w+", dtype=np.uint64, shape=(total, 2))
    at = 0
    for path, count in zip(hash_paths, counts):
        part = np.load(path, mmap_mode="r")
        part_ids = part.copy()
        unique = part_ids[:, 0] == UNIQUE
        part_ids[unique, 1] += np.uint64(at)  # a stream index of its own file: made unique across files
        joined[at:at + count] = part_ids
        at += count
    keep = first_occurrences_chunked(joined, max(1, math.ceil(total / PARTITION_ROWS)))
    del joined
    duplicates = ~keep
    path = Path(partial) / "duplicates.npy"
    with atomic_output(path) as f:
        np.save(f, duplicates, allow_pickle=False)
    (Path(partial) / "hashes.npy").unlink()
    return str(path), counts, int(duplicates.sum())


def duplicate_mask(path: str | None, first: int, stop: int) -> np.ndarray | None:
    """The duplicates of samples [first, stop) of the pass (a bool array), or None without --dedup."""
    if path is None:
        return None
    return np.array(np.load(path, mmap_mode="r")[first:stop])

"""Pure layout planning: per-sample record bytes -> block and shard boundaries.

A block is a run of consecutive samples that the loader fetches with one ranged read;
a shard is a run of consecutive blocks in one file.  Both are cut greedily: a block
closes before the sample that would push it past `block_bytes` or `block_samples`, a
shard before the block that would push it past `shard_bytes`.  A single sample larger
than the target still gets a block (and a shard) of its own.  No I/O happens here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_BLOCK_BYTES = 4 << 20     # 4 MiB: one Lustre stripe unit-ish read, cheap on HDFS and HTTP
DEFAULT_BLOCK_SAMPLES = 1024      # caps blocks of tiny samples so shuffling stays fine-grained
DEFAULT_SHARD_BYTES = 512 << 20   # 512 MiB: large files for Lustre/HDFS, few enough opens
ORDERS = ("shuffle", "keep")       # samples permuted with a seed at pack time, or in input order


@dataclass(frozen=True)
class Layout:
    """Boundaries as start indices: `block_starts` into samples, `shard_starts` into blocks."""

    block_starts: np.ndarray
    shard_starts: np.ndarray

    def block_bounds(self, num_samples: int) -> np.ndarray:
        """Block i holds samples [bounds[i], bounds[i + 1])."""
        return np.append(self.block_starts, num_samples)

    def shard_bounds(self) -> np.ndarray:
        """Shard j holds blocks [bounds[j], bounds[j + 1])."""
        return np.append(self.shard_starts, len(self.block_starts))


def greedy_cuts(item_bytes: np.ndarray, max_bytes: int, max_items: int | None = None) -> np.ndarray:
    """Start indices of consecutive groups, each within `max_bytes` and `max_items` (at least one item each)."""
    item_bytes = np.asarray(item_bytes, dtype=np.int64)
    n = len(item_bytes)
    ends = np.cumsum(item_bytes)
    starts, start = [], 0
    while start < n:
        before = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, before + max_bytes, side="right"))
        stop = max(stop, start + 1)
        if max_items:
            stop = min(stop, start + max_items)
        starts.append(start)
        start = stop
    return np.array(starts, dtype=np.int64)


def plan_layout(record_bytes, block_bytes=DEFAULT_BLOCK_BYTES, block_samples=DEFAULT_BLOCK_SAMPLES,
                shard_bytes=DEFAULT_SHARD_BYTES) -> Layout:
    """Cut samples into blocks, and blocks into shards, from (estimated) record sizes."""
    record_bytes = np.asarray(record_bytes, dtype=np.int64)
    block_starts = greedy_cuts(record_bytes, block_bytes, block_samples)
    per_block = np.add.reduceat(record_bytes, block_starts) if len(block_starts) else np.zeros(0, np.int64)
    return Layout(block_starts, greedy_cuts(per_block, shard_bytes))

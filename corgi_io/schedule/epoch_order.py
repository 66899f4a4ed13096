"""Seeding and the per-epoch block order.

Every random choice in the planner draws from :func:`epoch_rng`, keyed by
``(seed, epoch, stream, *ids)``. Each consumer has its own ``stream`` tag so two
consumers never share a random sequence, and the ids (rank, worker, buffer
index...) make every draw reproducible on its own, independent of what was
drawn before it or on another process.
"""
from __future__ import annotations

import numpy as np

from corgi_io.errors import ArgumentError

# Stream tags: one per consumer of randomness.
BLOCKS, BALANCE, BUFFER, WINDOW, FULL, BUDGET = range(6)


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """A numpy Generator determined by ``(seed, epoch, *stream)`` alone.

    Uses ``np.random.SeedSequence`` so that nearby keys give independent
    streams. All values must be non-negative integers.
    """
    key = [int(seed), int(epoch), *map(int, stream)]
    if min(key) < 0:
        raise ArgumentError(f"seed, epoch and stream ids must be >= 0, got {key}")
    return np.random.default_rng(np.random.SeedSequence(key))


def block_order(num_blocks: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The epoch's block permutation (int64), identical on every rank.

    Every rank computes it from the shared ``(seed, epoch)`` with no
    communication; a new epoch gives a new permutation. ``shuffle=False``
    returns the natural order ``0..B-1`` (the "none" loader mode).
    """
    if not shuffle:
        return np.arange(num_blocks, dtype=np.int64)
    return epoch_rng(seed, epoch, BLOCKS).permutation(num_blocks).astype(np.int64)

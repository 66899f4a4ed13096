"""Pieces: contiguous sample ranges inside one block, one ranged read each.

A pieces array is int64 of shape (P, 3), rows ``(block, start, stop)`` with
global sample indices ``block_first[block] <= start < stop <=
block_first[block] + block_count[block]``. A pieces array read in row order
defines a *sample sequence*; plans are made by cutting such sequences.
"""
from __future__ import annotations

import numpy as np

EMPTY = np.zeros((0, 3), dtype=np.int64)


def block_pieces(order: np.ndarray, block_first: np.ndarray, block_count: np.ndarray) -> np.ndarray:
    """One whole-block piece per entry of ``order``, in that order."""
    order = np.asarray(order, dtype=np.int64)
    return np.stack([order, block_first[order], block_first[order] + block_count[order]], axis=1)


def piece_counts(pieces: np.ndarray) -> np.ndarray:
    """Samples in each piece (int64)."""
    return pieces[:, 2] - pieces[:, 1]


def piece_sizes(pieces: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Size sum of each piece, from ``prefix`` (the per-sample sizes' prefix sums, ``prefix[0] = 0``)."""
    return prefix[pieces[:, 2]] - prefix[pieces[:, 1]]


def positions(pieces: np.ndarray) -> np.ndarray:
    """Where each piece starts in the sample sequence of ``pieces``, plus the total: int64 (P + 1,)."""
    return np.concatenate(([0], np.cumsum(piece_counts(pieces))))


def piece_samples(pieces: np.ndarray) -> np.ndarray:
    """Global sample ids of ``pieces`` in read order (int64)."""
    pieces = np.asarray(pieces, dtype=np.int64).reshape(-1, 3)
    counts = piece_counts(pieces)
    skip = np.cumsum(counts) - counts
    return np.arange(counts.sum(), dtype=np.int64) + np.repeat(pieces[:, 1] - skip, counts)


def cut(pieces: np.ndarray, start: int, stop: int, cum: np.ndarray | None = None) -> np.ndarray:
    """Pieces covering positions ``[start, stop)`` of the sample sequence of
    ``pieces``, taken periodically (position ``p + total`` is position ``p``:
    that is how padding wraps). Only the pieces at the two ends are split.
    ``cum``: ``positions(pieces)`` when the caller already has it (then a cut
    costs O(log P + its own pieces) instead of O(P))."""
    cum = positions(pieces) if cum is None else cum
    total = int(cum[-1])
    out = [EMPTY]
    for lap in range(start // total, -(-stop // total)) if stop > start else ():
        lo, hi = max(start - lap * total, 0), min(stop - lap * total, total)
        i = np.arange(np.searchsorted(cum, lo, "right") - 1, np.searchsorted(cum, hi, "left"))
        rows = pieces[i].copy()
        rows[:, 1] += np.maximum(lo - cum[i], 0)
        rows[:, 2] -= np.maximum(cum[i + 1] - hi, 0)
        out.append(rows)
    return np.concatenate(out)


def merge_adjacent(pieces: np.ndarray) -> np.ndarray:
    """Join consecutive pieces of the same block where one ends where the next
    starts, so that they become one read."""
    if len(pieces) < 2:
        return pieces
    joins = (pieces[1:, 0] == pieces[:-1, 0]) & (pieces[1:, 1] == pieces[:-1, 2])
    heads = np.flatnonzero(np.concatenate(([True], ~joins)))
    out = pieces[heads].copy()
    out[:, 2] = pieces[np.concatenate((heads[1:] - 1, [len(pieces) - 1])), 2]
    return out

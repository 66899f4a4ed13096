"""How well a plan shuffles, as a number: the entropy of the gaps between neighbouring samples (issue 32 §4).

The measure is MosaicML Streaming's (its simulator's `shuffle_quality`): take the order in which a rank yields
its samples, the absolute differences between neighbours' indices, and the Shannon entropy (bits) of their
distribution; do the same with each sample's block, and add the two.  An unshuffled order has one gap (1) and
entropy 0; the more different gaps, the nearer to a full shuffle.  The number alone is hard to read, so
`shuffle_quality` also gives the same measure of a full random permutation of the same samples, and the ratio:
CorgiPile trades `buffer_blocks` (memory) for that ratio, and `corgi plan` shows it.  Pure: numpy only.

Cost: O(n log n) for the n samples of the order (a sort inside `np.unique`), memory O(n), whatever the pack's size.
"""
from __future__ import annotations

import numpy as np


def gap_entropy(order: np.ndarray) -> float:
    """The entropy, in bits, of the distribution of |order[i+1] - order[i]| (0 for fewer than 2 items)."""
    order = np.asarray(order, dtype=np.int64)
    if len(order) < 2:
        return 0.0
    _, counts = np.unique(np.abs(np.diff(order)), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def shuffle_quality(order: np.ndarray, block_first: np.ndarray, num_samples: int, seed: int = 0) -> dict:
    """{samples, blocks, total, full_shuffle, ratio} of the sample ids in `order` (global ids, in yield order):
    the gap entropies of the samples and of their blocks (`block_first`: each block's first sample, ascending),
    their sum, the same sum for what a full shuffle of the pack's `num_samples` would give a rank of as many
    samples (the first of a random permutation, generator `seed`), and total / that."""
    order = np.asarray(order, dtype=np.int64)
    block_first = np.asarray(block_first, dtype=np.int64)
    samples, blocks = gap_entropy(order), gap_entropy(_blocks(order, block_first))
    full = np.random.default_rng(seed).choice(num_samples, size=len(order), replace=False)  # O(len(order))
    full_bits = gap_entropy(full) + gap_entropy(_blocks(full, block_first))
    return {"samples": samples, "blocks": blocks, "total": samples + blocks, "full_shuffle": full_bits,
            "ratio": (samples + blocks) / full_bits if full_bits else 1.0}


def _blocks(order: np.ndarray, block_first: np.ndarray) -> np.ndarray:
    """The block of each sample id of `order`."""
    return np.searchsorted(block_first, order, side="right") - 1

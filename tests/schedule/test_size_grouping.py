"""group_by_size (schedule.batches.SizeGrouper through buffer_plan): whole batches, every sample once, batches of
similar sizes in a shuffled order, and far less padding than size-balanced or random batches."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.errors import ArgumentError
from corgi_io.schedule import buffer_plan
from corgi_io.schedule.pieces import block_pieces


def pieces_and_sizes(blocks: int, per_block: int, seed: int):
    rng = np.random.default_rng(seed)
    sizes = np.minimum(np.round(rng.lognormal(np.log(300), 1.0, blocks * per_block)), 8192).astype(np.int64) + 1
    first = np.arange(blocks) * per_block
    return block_pieces(rng.permutation(blocks), first, np.full(blocks, per_block)), sizes


def stream(pieces, sizes, batch_size, group, seed=0, buffer_pieces=4) -> np.ndarray:
    return np.concatenate([order for _, order in buffer_plan(pieces, buffer_pieces=buffer_pieces, seed=seed,
                                                             sizes=sizes, batch_size=batch_size, group_by_size=group)])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 40), st.integers(1, 33), st.integers(0, 99))
def test_grouped_batches_hold_every_sample_once_with_the_partial_batch_last(blocks, per_block, batch_size, seed):
    pieces, sizes = pieces_and_sizes(blocks, per_block, seed)
    ids = stream(pieces, sizes, batch_size, True, seed)
    assert sorted(ids.tolist()) == list(range(blocks * per_block))


def padding_waste(ids, sizes, batch_size) -> float:
    full = len(ids) // batch_size * batch_size
    batches = sizes[ids[:full]].reshape(-1, batch_size)
    padded = batches.max(axis=1).sum() * batch_size
    return 1 - batches.sum() / padded


def test_grouping_pads_far_less_than_balanced_or_random_batches():
    pieces, sizes = pieces_and_sizes(64, 64, 1)
    grouped = padding_waste(stream(pieces, sizes, 32, True, buffer_pieces=16), sizes, 32)
    balanced = padding_waste(stream(pieces, sizes, 32, False, buffer_pieces=16), sizes, 32)
    shuffled = padding_waste(np.random.default_rng(0).permutation(len(sizes)), sizes, 32)
    assert grouped < 0.35 < 0.7 < min(balanced, shuffled), (grouped, balanced, shuffled)  # 0.27 against 0.85


def test_grouped_batches_come_in_a_shuffled_order_of_similar_sizes():
    pieces, sizes = pieces_and_sizes(16, 64, 2)
    ids = stream(pieces, sizes, 16, True)
    first = [order for _, order in buffer_plan(pieces, buffer_pieces=4, sizes=sizes, batch_size=16,
                                               group_by_size=True)][0]
    maxima = sizes[first].reshape(-1, 16).max(axis=1)
    assert not np.all(np.diff(maxima) >= 0) and not np.all(np.diff(maxima) <= 0)  # not in size order
    spread = [np.ptp(sizes[ids[i:i + 16]]) for i in range(0, 64 * 16, 16)]
    assert np.median(spread) < np.ptp(sizes) / 10


def test_grouping_needs_batches():
    pieces, sizes = pieces_and_sizes(2, 8, 0)
    with pytest.raises(ArgumentError, match="group_by_size"):
        list(buffer_plan(pieces, sizes=sizes, group_by_size=True))

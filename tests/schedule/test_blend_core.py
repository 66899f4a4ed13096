"""schedule.blend: quotas, epochized passes, interleaved epoch runs and stratified batch counts, property-tested."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.errors import ArgumentError
from corgi_io.schedule.blend import (Sources, check_weights, epoch_quotas, epoch_runs, pass_runs,
                                     stratified_counts)
from corgi_io.schedule.pieces import piece_samples
from corgi_io.schedule.spec import BlockTable


def table(counts) -> BlockTable:
    counts = np.asarray(counts, np.int64)
    return BlockTable(np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64), counts)


weights_strategy = st.lists(st.floats(0.01, 10), min_size=1, max_size=5).map(lambda w: np.array(w) / sum(w))
block_counts = st.lists(st.integers(1, 9), min_size=1, max_size=12)


@given(weights_strategy, st.integers(1, 100_000))
def test_quotas_sum_to_the_epoch_and_round_each_share(weights, n):
    quotas = epoch_quotas(weights, n)
    assert quotas.sum() == n and np.all(np.abs(quotas - weights * n) < 1)


@pytest.mark.parametrize("weights, message", [
    ({"a": -1, "b": 1}, "non-negative"), ({"a": 0, "b": 0}, "not all zero"), ({"a": float("nan"), "b": 1}, "finite"),
    ({"a": 1}, "exactly the sources"), ({"a": 1, "b": 1, "c": 1}, "exactly the sources"), ([1], "1 weights"),
])
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ArgumentError, match=message):
        check_weights(["a", "b"], weights)


def test_a_source_named_twice_is_refused_and_weights_normalise():
    with pytest.raises(ArgumentError, match="twice"):
        check_weights(["a", "a"], [1, 1])
    assert check_weights(["a", "b"], [3, 1]).tolist() == [0.75, 0.25]


@settings(max_examples=60)
@given(block_counts, st.integers(0, 3), st.integers(0, 200), st.integers(0, 200))
def test_each_pass_holds_every_sample_once_in_a_fresh_order(counts, source, start, length):
    t = table(counts)
    n = t.num_samples
    stream = piece_samples(pass_runs(t, 7, source, 0, 3 * n))
    passes = stream.reshape(3, n)
    assert all(sorted(p.tolist()) == list(range(n)) for p in passes)
    longer = piece_samples(pass_runs(t, 7, source, 0, start + length + n))
    window = piece_samples(pass_runs(t, 7, source, start, start + length))
    assert window.tolist() == longer[start:start + length].tolist()  # a window is that stretch of the stream


@settings(max_examples=60)
@given(st.lists(block_counts, min_size=1, max_size=4), st.integers(1, 300), st.integers(0, 4), st.data())
def test_epoch_runs_take_each_quota_and_continue_where_the_last_epoch_stopped(all_counts, n, epoch, data):
    sources = Sources.of([table(counts) for counts in all_counts])
    weights = data.draw(st.lists(st.floats(0.01, 5), min_size=len(all_counts), max_size=len(all_counts)))
    quotas = epoch_quotas(np.array(weights) / sum(weights), n)
    runs, owners = epoch_runs(sources, quotas, 3, epoch)
    samples = piece_samples(runs)
    assert len(samples) == n
    source_of_sample = np.searchsorted(sources.sample_base, samples, side="right") - 1
    assert np.array_equal(np.bincount(source_of_sample, minlength=len(quotas)), quotas)
    assert np.array_equal(sources.source_of_blocks(runs[:, 0]), owners)
    for s, t in enumerate(sources.tables):  # epochized: this epoch's share is the next stretch of the passes
        expected = piece_samples(pass_runs(t, 3, s, epoch * quotas[s], (epoch + 1) * quotas[s]))
        assert sorted((samples[source_of_sample == s] - sources.sample_base[s]).tolist()) == sorted(expected.tolist())


def test_a_large_source_is_consumed_without_replacement_across_epochs():
    sources = Sources.of([table([10] * 10), table([5] * 2)])  # 100 and 10 samples; 20 a epoch each
    quotas = epoch_quotas(np.array([0.5, 0.5]), 40)
    seen = np.concatenate([piece_samples(epoch_runs(sources, quotas, 0, e)[0]) for e in range(5)])
    large = seen[seen < 100]
    assert sorted(large.tolist()) == list(range(100))  # five epochs: one whole pass, nothing twice
    small = seen[seen >= 100]
    assert np.all(np.bincount(small - 100) == 10)  # 10 passes of the small source


def test_sources_are_interleaved_through_the_epoch():
    sources = Sources.of([table([4] * 50), table([4] * 50)])
    runs, owners = epoch_runs(sources, epoch_quotas(np.array([0.75, 0.25]), 160), 0, 0)
    counts = runs[:, 2] - runs[:, 1]
    first_half = np.cumsum(counts) <= 80
    share = counts[first_half & (owners == 1)].sum() / counts[first_half].sum()
    assert 0.2 <= share <= 0.3


@given(weights_strategy, st.integers(1, 64), st.integers(1, 200))
def test_every_batch_is_within_one_sample_of_its_share(weights, batch_size, batches):
    counts = stratified_counts(weights, batch_size, batches)
    assert np.all(counts.sum(axis=1) == batch_size)
    assert np.all(np.abs(counts - weights * batch_size) < 1)
    running = np.cumsum(counts, axis=0)
    targets = np.outer(np.arange(1, batches + 1), weights * batch_size)
    assert np.all(np.abs(running - targets) < len(weights))  # running totals never drift

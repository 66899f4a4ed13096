"""schedule.blend: quotas, epochized passes, the epoch as a virtual pack (`BlendEpoch`) and batch rows."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.errors import ArgumentError
from corgi_io.schedule.blend import (
    BlendEpoch,
    check_weights,
    compose_rows,
    epoch_quotas,
    pass_runs,
    row_sizes,
)
from corgi_io.schedule.pieces import piece_samples
from corgi_io.schedule.spec import BlockTable, samples_per_rank
from helpers.blends import within_one_possible


def table(counts, seed: int = 0) -> BlockTable:
    """A pack of blocks of `counts` samples with random per-sample sizes."""
    counts = np.asarray(counts, np.int64)
    sizes = np.random.default_rng(seed).integers(1, 100, int(counts.sum()))
    return BlockTable.from_sizes(np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64), counts, sizes)


def normalised(weights) -> np.ndarray:
    weights = np.asarray(weights, np.float64)
    return weights / weights.sum()


weights_strategy = st.lists(st.floats(0.01, 10), min_size=1, max_size=5).map(normalised)
block_counts = st.lists(st.integers(1, 9), min_size=1, max_size=12)


@st.composite
def blends(draw) -> tuple:
    """(source tables, quotas, seed): a small blend's sources and per-epoch quotas."""
    all_counts = draw(st.lists(block_counts, min_size=1, max_size=4))
    tables = [table(counts, seed=s) for s, counts in enumerate(all_counts)]
    weights = draw(st.lists(st.floats(0.01, 5), min_size=len(tables), max_size=len(tables)))
    quotas = epoch_quotas(normalised(weights), draw(st.integers(1, 300)))
    return tables, quotas, draw(st.integers(0, 9))


def source_stream(tables, quotas, seed, source, epochs) -> np.ndarray:
    """Source `source`'s local ids over epochs 0..epochs-1, epoch after epoch, as the virtual packs map them."""
    parts = []
    for e in range(epochs):
        blend = BlendEpoch.of(tables, quotas, seed, e)
        ids = np.arange(blend.num_samples, dtype=np.int64)
        owner, local = blend.local_ids(ids)
        parts.append(local[owner == source])
    return np.concatenate(parts)


# --- quotas and weights ------------------------------------------------------------------------------

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
    assert check_weights(["a", "b"], {"b": 1, "a": 3}).tolist() == [0.75, 0.25]


# --- passes --------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
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


def test_passes_of_a_many_block_source_come_in_different_orders():
    t = table([3] * 40)
    first, second = piece_samples(pass_runs(t, 7, 0, 0, 2 * t.num_samples)).reshape(2, -1)
    assert first.tolist() != second.tolist()
    other_source = piece_samples(pass_runs(t, 7, 1, 0, t.num_samples))
    assert other_source.tolist() != first.tolist()


# --- the epoch as a virtual pack ---------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(0, 4))
def test_each_source_gives_exactly_its_quota_of_virtual_ids(blend_args, epoch):
    tables, quotas, seed = blend_args
    blend = BlendEpoch.of(tables, quotas, seed, epoch)
    assert blend.num_samples == quotas.sum() == blend.table.num_samples
    ids = np.arange(blend.num_samples, dtype=np.int64)
    owner, _ = blend.local_ids(ids)
    assert np.bincount(owner, minlength=len(quotas)).tolist() == quotas.tolist()
    assert np.all(np.diff(owner) >= 0)  # virtual ids come source after source
    for s in range(len(tables)):  # a source's runs are its virtual blocks, together its virtual ids
        assert piece_samples(blend.source_runs(s)).tolist() == ids[owner == s].tolist()


@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(0, 4), st.data())
def test_local_ids_and_local_pieces_map_back_to_the_pass_stream(blend_args, epoch, data):
    tables, quotas, seed = blend_args
    blend = BlendEpoch.of(tables, quotas, seed, epoch)
    owner, local = blend.local_ids(np.arange(blend.num_samples, dtype=np.int64))
    for s, (t, q) in enumerate(zip(tables, quotas.tolist())):
        expected = piece_samples(pass_runs(t, seed, s, epoch * q, (epoch + 1) * q))
        assert local[owner == s].tolist() == expected.tolist()  # this epoch's stretch of s's passes, in order
    first, count = blend.table.first, blend.table.count
    for block in data.draw(st.lists(st.integers(0, len(count) - 1), max_size=6)):
        a = data.draw(st.integers(int(first[block]), int(first[block] + count[block]) - 1))
        z = data.draw(st.integers(a + 1, int(first[block] + count[block])))
        source, (b, start, stop) = blend.local_piece((block, a, z))
        src = tables[source]
        assert source == owner[a] and list(range(start, stop)) == local[a:z].tolist()
        assert src.first[b] <= start < stop <= src.first[b] + src.count[b]  # inside one block of the source


@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(1, 5))
def test_the_next_epoch_continues_each_source_where_the_last_one_stopped(blend_args, epochs):
    tables, quotas, seed = blend_args
    for s, (t, q) in enumerate(zip(tables, quotas.tolist())):
        stream = source_stream(tables, quotas, seed, s, epochs)
        assert stream.tolist() == piece_samples(pass_runs(t, seed, s, 0, epochs * q)).tolist()
        n = t.num_samples
        for p in range(len(stream) // n):  # every whole pass holds each sample once
            assert sorted(stream[p * n:(p + 1) * n].tolist()) == list(range(n))
        rest = stream[len(stream) // n * n:]
        assert len(set(rest.tolist())) == len(rest)  # the pass under way repeats nothing yet


def test_a_large_source_is_consumed_without_replacement_across_epochs():
    tables = [table([10] * 10), table([5] * 2)]  # 100 and 10 samples; 20 an epoch each
    quotas = epoch_quotas(np.array([0.5, 0.5]), 40)
    large = source_stream(tables, quotas, 3, 0, 5)
    assert sorted(large.tolist()) == list(range(100))  # five epochs: one whole pass, nothing twice
    assert len(set(source_stream(tables, quotas, 3, 0, 2).tolist())) == 40
    small = source_stream(tables, quotas, 3, 1, 5)
    assert np.all(np.bincount(small, minlength=10) == 10)  # 10 passes of the small source
    for p in range(10):
        assert sorted(small[p * 10:(p + 1) * 10].tolist()) == list(range(10))


@settings(max_examples=40, deadline=None)
@given(blends(), st.integers(0, 3), st.data())
def test_virtual_sizes_slice_and_index_as_the_sources_sizes(blend_args, epoch, data):
    tables, quotas, seed = blend_args
    blend = BlendEpoch.of(tables, quotas, seed, epoch)
    n = blend.num_samples
    owner, local = blend.local_ids(np.arange(n, dtype=np.int64))
    expected = np.array([tables[s].sizes[i] for s, i in zip(owner.tolist(), local.tolist())], np.int64)
    sizes = blend.table.sizes
    assert sizes[:].tolist() == expected.tolist()
    a, z = sorted(data.draw(st.lists(st.integers(0, n), min_size=2, max_size=2)))
    assert sizes[a:z].tolist() == expected[a:z].tolist()
    assert sizes[a:z:2].tolist() == expected[a:z:2].tolist()
    picks = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=12)), np.int64)
    assert sizes[picks].tolist() == expected[picks].tolist()
    grid = np.arange(n, dtype=np.int64)[: n // 2 * 2].reshape(-1, 2)
    assert sizes[grid].shape == grid.shape and np.array_equal(sizes[grid], expected[grid])
    sums = [int(expected[f:f + c].sum()) for f, c in zip(blend.table.first.tolist(), blend.table.count.tolist())]
    assert blend.table.size_sum.tolist() == sums


# --- rows ----------------------------------------------------------------------------------------------

@st.composite
def fresh_epochs(draw) -> tuple:
    """(weights, totals, batch_size): the samples a rank takes from each source in a fresh epoch of a blend."""
    weights = draw(weights_strategy)
    n, world = draw(st.integers(1, 5000)), draw(st.integers(1, 8))
    totals = np.array([samples_per_rank(int(q), world) for q in epoch_quotas(weights, n)], np.int64)
    return weights, totals, draw(st.integers(1, 64))



@settings(max_examples=150, deadline=None)
@given(fresh_epochs())
def test_rows_of_a_fresh_epoch_hold_each_source_within_one_sample_of_its_share(args):
    weights, totals, batch_size = args
    sizes = row_sizes(int(totals.sum()), batch_size)
    rows = compose_rows(weights, totals, sizes)
    assert rows.shape == (len(sizes), len(weights)) and np.all(rows >= 0)
    assert rows.sum(axis=1).tolist() == sizes.tolist()
    assert rows.sum(axis=0).tolist() == totals.tolist()
    full = sizes == batch_size
    if within_one_possible(weights, totals, sizes, batch_size):
        assert np.all(np.abs(rows[full] - weights * batch_size) <= 1 + 1e-9), rows[full]


@pytest.mark.parametrize("weights, n, world, batch_size", [
    ([0.5, 0.3, 0.2], 20_000, 2, 32), ([0.05, 0.95], 10_001, 3, 7), ([0.1, 0.2, 0.3, 0.4], 4099, 8, 64),
    ([1 / 3, 1 / 3, 1 / 3], 1000, 4, 10),
])
def test_rows_of_a_large_fresh_epoch_are_all_within_one_sample_of_their_share(weights, n, world, batch_size):
    weights = np.array(weights)
    totals = np.array([samples_per_rank(int(q), world) for q in epoch_quotas(weights, n)], np.int64)
    sizes = row_sizes(int(totals.sum()), batch_size)
    rows = compose_rows(weights, totals, sizes)
    assert rows.sum(axis=0).tolist() == totals.tolist()
    full = sizes == batch_size
    assert np.all(np.abs(rows[full] - weights * batch_size) <= 1 + 1e-9)
    running = np.cumsum(rows, axis=0)
    targets = np.outer(np.cumsum(sizes), totals / totals.sum())
    assert np.all(np.abs(running - targets) < len(weights))  # running totals never drift


def test_tiny_skewed_totals_leave_no_composition_within_one_sample():
    weights, totals = normalised([1.0, 7.0, 0.5]), np.array([1, 3, 1])  # one row of 5: source 1 wants 4.1
    sizes = row_sizes(5, 5)
    assert not within_one_possible(weights, totals, sizes, 5)
    assert compose_rows(weights, totals, sizes).tolist() == [[1, 3, 1]]  # the totals win


@settings(max_examples=100, deadline=None)
@given(weights_strategy, st.data(), st.integers(1, 64), st.integers(0, 200))
def test_rows_of_any_totals_sum_to_their_sizes_and_the_totals(weights, data, batch_size, extra):
    totals = np.array(data.draw(st.lists(st.integers(0, 300), min_size=len(weights), max_size=len(weights))), np.int64)
    sizes = row_sizes(int(totals.sum()), batch_size)
    rows = compose_rows(weights, totals, sizes)
    assert np.all(rows >= 0) and rows.sum(axis=1).tolist() == sizes.tolist()
    assert rows.sum(axis=0).tolist() == totals.tolist()


@settings(max_examples=100, deadline=None)
@given(fresh_epochs())
def test_drop_last_rows_never_take_more_of_a_source_than_its_total(args):
    weights, totals, batch_size = args
    sizes = row_sizes(int(totals.sum()), batch_size, drop_last=True)
    assert len(sizes) == totals.sum() // batch_size and np.all(sizes == batch_size)
    rows = compose_rows(weights, totals, sizes)
    assert np.all(rows >= 0) and rows.sum(axis=1).tolist() == sizes.tolist()
    assert np.all(rows.sum(axis=0) <= totals)


def test_row_sizes_are_full_rows_then_the_rest():
    assert row_sizes(10, 4).tolist() == [4, 4, 2]
    assert row_sizes(10, 4, drop_last=True).tolist() == [4, 4]
    assert row_sizes(8, 4).tolist() == [4, 4] and row_sizes(0, 4).tolist() == []

"""Rank assignment: exact counts, padding/drop rule, valid pieces, determinism, balance."""
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from corgi_io.schedule import (assign_ranks, block_order, block_pieces, cut, epoch_rng, piece_samples, piece_sizes,
                               rank_budgets, samples_per_rank, slowest_time)


def rank_time(plans, prefix, cost):
    """The slowest rank's predicted time of ``plans`` (sizes from ``prefix``)."""
    return slowest_time([piece_sizes(p, prefix).sum() for p in plans], [piece_samples(p).size for p in plans], cost)


@st.composite
def layouts(draw, max_blocks=60):
    """(block_first, block_count, sizes): 1..200 samples per block (sometimes constant)."""
    nb = draw(st.integers(1, max_blocks))
    if draw(st.booleans()):
        counts = np.full(nb, draw(st.integers(1, 200)))
    else:
        counts = np.array(draw(st.lists(st.integers(1, 200), min_size=nb, max_size=nb)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = int(counts.sum())
    kind = draw(st.sampled_from(["lognormal", "bimodal", "constant"]))
    sizes = {"lognormal": lambda: rng.lognormal(8, 1, n),
             "bimodal": lambda: np.where(rng.random(n) < 0.2, 50_000, 1_000) * rng.uniform(0.8, 1.2, n),
             "constant": lambda: np.full(n, 777.0)}[kind]()
    return np.cumsum(counts) - counts, counts, np.maximum(sizes, 1).astype(np.int64)


def lognormal_layout(n, seed, mean_block=64):
    rng = np.random.default_rng(seed)
    counts = rng.integers(mean_block - 16, mean_block + 17, n // (mean_block - 16) + 1)
    counts = counts[: np.searchsorted(np.cumsum(counts), n)]
    counts = np.append(counts, n - counts.sum())
    sizes = np.maximum(rng.lognormal(0, 1, n) * 1000, 1).astype(np.int64)
    return np.cumsum(counts) - counts, counts, sizes


def check_pieces(plan, first, count):
    assert plan.dtype == np.int64 and plan.ndim == 2 and plan.shape[1] == 3
    b, start, stop = plan.T
    assert ((0 <= b) & (b < len(count))).all()
    assert ((first[b] <= start) & (start < stop) & (stop <= first[b] + count[b])).all()


def check_padding_rule(plans, first, count, seed, epoch, world, drop_last):
    """Multiplicities are 1 + (times the sample sits in the first W*n - N positions
    of the epoch sequence), or with drop_last 1 except the tail of the sequence."""
    n_total = int(count.sum())
    n = samples_per_rank(n_total, world, drop_last)
    seq = block_pieces(block_order(len(count), seed, epoch), first, count)
    got = np.bincount(np.concatenate([piece_samples(p) for p in plans] + [np.zeros(0, np.int64)]),
                      minlength=n_total)
    want = np.ones(n_total, np.int64)
    if drop_last:
        want[piece_samples(cut(seq, world * n, n_total))] = 0
    elif world * n > n_total:
        np.add.at(want, piece_samples(cut(seq, n_total, world * n)), 1)
    np.testing.assert_array_equal(got, want)


def test_samples_per_rank():
    assert samples_per_rank(10, 3) == 4 and samples_per_rank(10, 3, drop_last=True) == 3
    assert samples_per_rank(3, 8) == 1 and samples_per_rank(3, 8, drop_last=True) == 0
    with pytest.raises(ValueError):
        samples_per_rank(3, 0)


def test_epoch_rng_streams_are_independent_and_reproducible():
    a = epoch_rng(1, 2, 3).integers(0, 2**62, 4)
    np.testing.assert_array_equal(a, epoch_rng(1, 2, 3).integers(0, 2**62, 4))
    assert (a != epoch_rng(1, 2, 4).integers(0, 2**62, 4)).all()
    assert (a != epoch_rng(1, 3, 3).integers(0, 2**62, 4)).all()
    with pytest.raises(ValueError):
        epoch_rng(-1, 0)


@settings(max_examples=60, deadline=None)
@given(nb=st.integers(2, 500), seed=st.integers(0, 2**31), epoch=st.integers(0, 1000))
def test_block_order(nb, seed, epoch):
    order = block_order(nb, seed, epoch)
    np.testing.assert_array_equal(np.sort(order), np.arange(nb))
    np.testing.assert_array_equal(order, block_order(nb, seed, epoch))
    np.testing.assert_array_equal(block_order(nb, seed, epoch, shuffle=False), np.arange(nb))
    if nb >= 8:  # 1/8! chance of a collision is below hypothesis' radar
        assert (order != block_order(nb, seed, epoch + 1)).any()


@settings(max_examples=250, deadline=None)
@given(layout=layouts(), world=st.integers(1, 64), seed=st.integers(0, 2**31), epoch=st.integers(0, 50),
       drop_last=st.booleans(), balance=st.sampled_from(["count", "size", "dynamic"]))
def test_exact_counts_and_padding_rule(layout, world, seed, epoch, drop_last, balance):
    first, count, sizes = layout
    cost = np.random.default_rng(seed).uniform(0.5, 2, (world, 2))
    plans = assign_ranks(first, count, world, seed=seed, epoch=epoch, balance=balance, drop_last=drop_last,
                         sizes=sizes, cost_model=cost)
    n = samples_per_rank(int(count.sum()), world, drop_last)
    assert len(plans) == world
    for p in plans:
        check_pieces(p, first, count)
        assert (p[:, 2] - p[:, 1]).sum() == n
    check_padding_rule(plans, first, count, seed, epoch, world, drop_last)
    again = assign_ranks(first, count, world, seed=seed, epoch=epoch, balance=balance, drop_last=drop_last,
                         sizes=sizes, cost_model=cost)
    for a, b in zip(plans, again):
        np.testing.assert_array_equal(a, b)
    # few reads: count cuts at most 2 ends per rank; the balancers add a bounded number
    extra = sum(map(len, plans)) - len(count)
    assert extra <= (2 * world if balance == "count" else 2 * world + 8 * world)


# a case where the greedy alone ends 1 unit above the count plan (found by search)
_GREEDY_LOSES = (np.array([0, 6, 12]), np.array([6, 6, 5]), np.array(
    [6353, 3, 10, 279, 119, 39, 57, 988, 17, 20, 271, 1595, 17, 21, 9, 9, 2], np.int64))


@settings(max_examples=60, deadline=None)
@given(layout=layouts(), world=st.integers(1, 64), seed=st.integers(0, 2**31), epoch=st.integers(0, 20),
       drop_last=st.booleans())
@example(layout=_GREEDY_LOSES, world=6, seed=523, epoch=0, drop_last=False)
def test_size_balance_never_worse_than_count(layout, world, seed, epoch, drop_last):
    first, count, sizes = layout
    prefix = np.concatenate(([0], np.cumsum(sizes)))
    unit = np.tile([1.0, 0.0], (world, 1))
    kw = dict(seed=seed, epoch=epoch, drop_last=drop_last, sizes=sizes)
    by_size = assign_ranks(first, count, world, balance="size", **kw)
    by_count = assign_ranks(first, count, world, balance="count", **kw)
    assert rank_time(by_size, prefix, unit) <= rank_time(by_count, prefix, unit)


def test_count_mode_is_contiguous_slice_of_epoch_sequence():
    first, count = np.array([0, 3, 8]), np.array([3, 5, 2])
    plans = assign_ranks(first, count, 3, seed=5, epoch=1)
    seq = piece_samples(block_pieces(block_order(3, 5, 1), first, count))
    stream = np.concatenate([piece_samples(p) for p in plans])
    np.testing.assert_array_equal(stream, np.concatenate([seq, seq[:2]]))  # 3 ranks x 4 = 10 + 2 padding


def test_tiny_dataset_with_drop_last_gives_empty_plans():
    plans = assign_ranks([0], [3], 8, seed=0, epoch=0, drop_last=True, balance="size", sizes=np.ones(3, np.int64))
    assert [p.shape for p in plans] == [(0, 3)] * 8


@pytest.mark.parametrize("epoch", range(3))
def test_size_balance_target_lognormal(epoch):
    first, count, sizes = lognormal_layout(20_000, seed=epoch)
    prefix = np.concatenate(([0], np.cumsum(sizes)))
    plans = assign_ranks(first, count, 8, seed=7, epoch=epoch, balance="size", sizes=sizes)
    load = np.array([(prefix[p[:, 2]] - prefix[p[:, 1]]).sum() for p in plans])
    assert load.max() / load.mean() <= 1.02
    assert sum(map(len, plans)) <= 1.25 * len(count)  # balance costs few extra reads
    other = assign_ranks(first, count, 8, seed=7, epoch=epoch + 1, balance="size", sizes=sizes)
    assert not all(np.array_equal(np.sort(a[:, 0]), np.sort(b[:, 0])) for a, b in zip(plans, other))


def test_dynamic_two_to_one_speeds_within_5_percent():
    # per-block size scale varies (sources, resolutions): block densities differ, which is
    # what lets equal counts carry unequal work
    rng = np.random.default_rng(3)
    first, count, _ = lognormal_layout(30_000, seed=3)
    scale = np.repeat(rng.lognormal(0, 1, len(count)), count)
    sizes = np.maximum(rng.lognormal(0, 1, len(scale)) * scale * 1000, 1).astype(np.int64)
    prefix = np.concatenate(([0], np.cumsum(sizes)))
    cost = np.array([[1.0, 0.0]] * 4 + [[2.0, 0.0]] * 4)
    for epoch in range(3):
        plans = assign_ranks(first, count, 8, seed=1, epoch=epoch, balance="dynamic", sizes=sizes, cost_model=cost)
        total = sum((prefix[p[:, 2]] - prefix[p[:, 1]]).sum() for p in plans)
        assert rank_time(plans, prefix, cost) <= 1.05 * total / (1 / cost[:, 0]).sum()


def test_rank_budgets_equalise_predicted_time():
    cost = np.array([[1.0, 5.0], [2.0, 1.0], [0.5, 0.0]])
    budgets = rank_budgets(10_000.0, 100, cost, 3)
    assert budgets.sum() == pytest.approx(10_000.0)
    t = cost[:, 0] * budgets + cost[:, 1] * 100
    assert np.ptp(t) == pytest.approx(0.0, abs=1e-6)
    # a rank whose fixed cost alone exceeds the others' time gets nothing
    budgets = rank_budgets(100.0, 100, np.array([[1.0, 0.0], [1.0, 50.0]]), 2)
    np.testing.assert_allclose(budgets, [100.0, 0.0])
    np.testing.assert_allclose(rank_budgets(90.0, 7, None, 3), [30.0] * 3)


@settings(max_examples=60, deadline=None)
@given(layout=layouts(), world=st.integers(1, 16), seed=st.integers(0, 2**31), drop_last=st.booleans(),
       balance=st.sampled_from(["count", "size", "dynamic"]), data=st.data())
def test_partitions_read_only_own_blocks(layout, world, seed, drop_last, balance, data):
    first, count, sizes = layout
    owner = np.array(data.draw(st.lists(st.integers(0, world - 1), min_size=len(count), max_size=len(count))))
    have = np.bincount(np.repeat(owner, count), minlength=world)
    kw = dict(seed=seed, epoch=2, balance=balance, drop_last=drop_last, sizes=sizes,
              cost_model=np.ones((world, 2)), partitions=owner)
    if not drop_last and (have == 0).any():
        with pytest.raises(ValueError):
            assign_ranks(first, count, world, **kw)
        return
    plans = assign_ranks(first, count, world, **kw)
    n = int(have.min() if drop_last else have.max())
    for r, p in enumerate(plans):
        check_pieces(p, first, count)
        assert (owner[p[:, 0]] == r).all()
        ids = piece_samples(p)
        assert len(ids) == n
        mult = np.bincount(ids, minlength=len(sizes))[np.repeat(owner, count) == r]
        if drop_last:
            assert mult.max(initial=0) <= 1
        else:  # every own sample, padding spread evenly over the rank's own sequence
            assert mult.min() == n // have[r] and mult.max() <= -(-n // have[r])


def test_bad_arguments():
    first, count, sizes = np.array([0, 4]), np.array([4, 4]), np.ones(8, np.int64)
    for kw in ({"balance": "nope"}, {"balance": "size"}, {"balance": "dynamic", "sizes": sizes},
               {"balance": "size", "sizes": sizes[:5]}, {"partitions": [0, 2]},
               {"balance": "dynamic", "sizes": sizes, "cost_model": [[1.0, 0.0]]}):
        with pytest.raises(ValueError):
            assign_ranks(first, count, 2, seed=0, epoch=0, **kw)

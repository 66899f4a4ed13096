"""Worker split and buffer plans: exact counts, read-before-yield, reproducible shuffles."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from corgi_io.schedule import (SHUFFLE_MODES, assign_ranks, balanced_batches, buffer_plan, epoch_rng,
                               piece_samples, split_workers, worker_counts)
from corgi_io.schedule.epoch_order import WINDOW


def layout(counts):
    counts = np.asarray(counts)
    return np.cumsum(counts) - counts, counts


def rank_pieces(counts, world=3, seed=0, epoch=0):
    first, count = layout(counts)
    return assign_ranks(first, count, world, seed=seed, epoch=epoch)


@settings(max_examples=80, deadline=None)
@given(counts=st.lists(st.integers(1, 200), min_size=1, max_size=40), workers=st.integers(0, 8),
       seed=st.integers(0, 1000))
def test_split_workers_exact_and_lossless(counts, workers, seed):
    pieces = rank_pieces(counts, world=2, seed=seed)[1]
    parts = split_workers(pieces, workers)
    k = max(1, workers)
    n = len(piece_samples(pieces))
    assert len(parts) == k
    assert [len(piece_samples(p)) for p in parts] == (n // k + (np.arange(k) < n % k)).tolist()
    np.testing.assert_array_equal(np.concatenate([piece_samples(p) for p in parts]), piece_samples(pieces))
    assert sum(map(len, parts)) <= len(pieces) + k - 1
    assert all(((p[:, 1] < p[:, 2])).all() for p in parts)


def test_worker_counts_depend_on_n_and_k_only():
    assert worker_counts(10, 4).tolist() == [3, 3, 2, 2]
    assert worker_counts(5, 0).tolist() == [5]


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(1, 120), min_size=1, max_size=30), mode=st.sampled_from(SHUFFLE_MODES),
       buffer_pieces=st.integers(1, 6), window=st.integers(1, 300), seed=st.integers(0, 1000),
       balanced=st.booleans(), batch=st.integers(1, 40))
def test_every_read_sample_yielded_once_after_its_read(counts, mode, buffer_pieces, window, seed, balanced, batch):
    pieces = rank_pieces(counts, world=2, seed=seed)[0]
    sizes = np.random.default_rng(seed).lognormal(5, 1, sum(counts)).astype(np.int64) + 1
    extra = dict(sizes=sizes, batch_size=batch) if balanced and mode == "corgipile" else {}
    pending = Counter()
    yielded = []
    for read, order in buffer_plan(pieces, shuffle=mode, buffer_pieces=buffer_pieces, window_samples=window,
                                   seed=seed, epoch=1, rank=0, worker=0, **extra):
        pending.update(piece_samples(read).tolist())
        pending.subtract(order.tolist())
        assert min(pending.values(), default=0) >= 0  # never yields what was not read
        yielded.extend(order.tolist())
    assert not +pending
    assert sorted(yielded) == sorted(piece_samples(pieces).tolist())


def test_corgipile_reproducible_and_keyed_by_every_id():
    pieces = rank_pieces([50] * 12, world=1)[0]

    def plan(**kw):
        args = dict(buffer_pieces=3, seed=1, epoch=0, rank=0, worker=0) | kw
        return [order for _, order in buffer_plan(pieces, **args)]

    base = plan()
    assert all(np.array_equal(a, b) for a, b in zip(base, plan()))
    # within a buffer, samples are permuted; buffers get different permutations
    shapes = [np.argsort(o) for o in base]
    assert not np.array_equal(shapes[0], shapes[1])
    for change in ({"seed": 2}, {"epoch": 1}, {"rank": 1}, {"worker": 1}):
        assert not np.array_equal(base[0], plan(**change)[0]), change


def test_block_and_none_keep_piece_order():
    pieces = rank_pieces([7, 3, 9, 4], world=1)[0]
    for mode in ("block", "none"):
        out = list(buffer_plan(pieces, shuffle=mode, buffer_pieces=2))
        assert len(out) == 2
        np.testing.assert_array_equal(np.concatenate([o for _, o in out]), piece_samples(pieces))


def test_none_mode_with_natural_block_order_is_the_dataset_in_order():
    first, count = layout([5, 8, 2, 6])
    plans = assign_ranks(first, count, 2, seed=3, epoch=4, shuffle_blocks=False)
    stream = [o for p in plans for _, o in buffer_plan(p, shuffle="none")]
    np.testing.assert_array_equal(np.concatenate(stream), np.arange(21).tolist() + [0])  # 2 x 11, one pad


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(1, 60), min_size=1, max_size=10), window=st.integers(1, 100),
       seed=st.integers(0, 100))
def test_window_mode_is_a_sliding_buffer(counts, window, seed):
    pieces = rank_pieces(counts, world=1, seed=seed)[0]
    src = piece_samples(pieces)
    out = np.concatenate([o for _, o in buffer_plan(pieces, shuffle="window", window_samples=window, seed=seed)])
    pos_in = np.empty(src.max() + 1, np.int64)
    pos_in[src] = np.arange(len(src))
    # output k happens when input k + window arrives: nothing is emitted before it was pushed,
    # and with window=1 the stream is unshuffled
    assert (pos_in[out] <= np.arange(len(out)) + window - 1).all()
    if window == 1:
        np.testing.assert_array_equal(out, src)


def test_window_mode_matches_a_streaming_buffer():
    """Reference: tf.data-style buffer fed one sample at a time, same random draws."""
    pieces = rank_pieces([10, 20, 5], world=1)[0]
    cap = 8
    rng = epoch_rng(4, 2, WINDOW, 0, 0)  # rank 0, worker 0
    draws = iter(rng.random(35 + cap).tolist())
    buf, ref = [], []
    for x in piece_samples(pieces).tolist():
        u = next(draws)
        if len(buf) == cap:
            i = int(u * cap)
            ref.append(buf[i])
            buf[i] = x
        else:
            buf.append(x)
    while buf:
        i = int(next(draws) * len(buf))
        ref.append(buf[i])
        buf[i] = buf[-1]
        buf.pop()
    got = np.concatenate([o for _, o in buffer_plan(pieces, shuffle="window", window_samples=cap, seed=4, epoch=2)])
    assert got.tolist() == ref


def test_full_mode_one_sample_per_read():
    pieces = rank_pieces([10, 20, 5], world=1)[0]
    out = list(buffer_plan(pieces, shuffle="full", seed=1))
    assert all(r.shape == (1, 3) and r[0, 2] - r[0, 1] == 1 and o.tolist() == [r[0, 1]] for r, o in out)
    ids = [o[0] for _, o in out]
    assert sorted(ids) == list(range(35)) and ids != sorted(ids)


def test_bad_arguments():
    pieces = rank_pieces([4, 4], world=1)[0]
    for kw in ({"shuffle": "nope"}, {"shuffle": "window"}, {"buffer_pieces": 0},
               {"shuffle": "block", "batch_size": 4, "sizes": np.ones(8, np.int64)}, {"batch_size": 4}):
        with pytest.raises(ValueError):
            list(buffer_plan(pieces, **kw))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 600), batch=st.integers(1, 64), seed=st.integers(0, 1000))
def test_balanced_batches_partition_and_balance(n, batch, seed):
    rng = np.random.default_rng(seed)
    ids = rng.permutation(10_000)[:n]
    sizes = rng.integers(1, 100, n)
    target = batch * sizes.mean() if n else 0.0
    batched, carry = balanced_batches(ids, sizes, batch, target, np.random.default_rng(seed))
    assert len(carry) == n % batch and sorted(np.concatenate([batched, carry]).tolist()) == sorted(ids.tolist())
    if len(batched) >= 2 * batch:
        of = dict(zip(ids.tolist(), sizes.tolist()))
        sums = np.array([of[i] for i in batched.tolist()]).reshape(-1, batch).sum(1)
        assert np.ptp(sums) <= 2 * 99  # within about two samples (sizes < 100)


def test_balanced_batches_depend_on_seed():
    rng = np.random.default_rng(0)
    ids, sizes = np.arange(512), rng.lognormal(5, 1, 512).astype(np.int64) + 1
    a, _ = balanced_batches(ids, sizes, 32, 32 * sizes.mean(), np.random.default_rng(1))
    b, _ = balanced_batches(ids, sizes, 32, 32 * sizes.mean(), np.random.default_rng(2))
    groups = lambda x: {frozenset(g) for g in x.reshape(-1, 32).tolist()}
    assert groups(a) != groups(b)

"""The whole epoch plan, ranks x workers x buffers, as the loader will run it."""
import numpy as np
from hypothesis import given, settings, strategies as st

from corgi_io.schedule import (BlockTable, EpochSpec, assign_ranks, block_order, block_pieces, buffer_plan, cut,
                               piece_samples, rank_batches, samples_per_rank, simulate, split_workers)


@st.composite
def layouts(draw):
    nb = draw(st.integers(1, 40))
    if draw(st.booleans()):
        counts = np.full(nb, draw(st.integers(1, 200)))
    else:
        counts = np.array(draw(st.lists(st.integers(1, 200), min_size=nb, max_size=nb)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = np.maximum(rng.lognormal(6, draw(st.sampled_from([0.0, 1.0, 2.0])), counts.sum()), 1).astype(np.int64)
    return np.cumsum(counts) - counts, counts, sizes


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), world=st.integers(1, 16), workers=st.integers(0, 8), seed=st.integers(0, 10_000),
       epoch=st.integers(0, 20), drop_last=st.booleans(), balance=st.sampled_from(["count", "size"]),
       mode=st.sampled_from(["corgipile", "block", "window", "full"]), balanced=st.booleans(),
       batch=st.integers(1, 64))
def test_epoch_yields_every_sample_once_plus_padding(layout, world, workers, seed, epoch, drop_last, balance,
                                                     mode, balanced, batch):
    first, count, sizes = layout
    total = int(count.sum())
    n = samples_per_rank(total, world, drop_last)
    plans = assign_ranks(first, count, world, seed=seed, epoch=epoch, balance=balance, drop_last=drop_last,
                         sizes=sizes)
    spec = EpochSpec(world, seed=seed, epoch=epoch, shuffle=mode, num_workers=workers, buffer_pieces=3,
                     window_samples=50, batch_size=batch if balanced and mode == "corgipile" else None)
    yielded, steps = [], set()
    for r, pieces in enumerate(plans):
        batches = rank_batches(pieces, spec, r, sizes, batch)
        steps.add(len(batches))
        ids = np.concatenate(batches + [np.zeros(0, np.int64)])
        assert len(ids) == n
        yielded.append(ids)
    assert len(steps) == 1  # every rank runs the same number of DataLoader steps
    mult = np.bincount(np.concatenate(yielded), minlength=total)
    seq = block_pieces(block_order(len(count), seed, epoch), first, count)
    want = np.ones(total, np.int64)
    if drop_last:
        want[piece_samples(cut(seq, world * n, total))] = 0
    else:
        np.add.at(want, piece_samples(cut(seq, total, world * n)), 1)
    np.testing.assert_array_equal(mult, want)


@settings(max_examples=30, deadline=None)
@given(layout=layouts(), workers=st.integers(0, 8), seed=st.integers(0, 10_000))
def test_one_read_per_piece_in_corgipile_mode(layout, workers, seed):
    first, count, _ = layout
    pieces = assign_ranks(first, count, 2, seed=seed, epoch=0)[0]
    parts = split_workers(pieces, workers)
    reads = [r for p in parts for r, _ in buffer_plan(p, buffer_pieces=4, seed=seed)]
    reads = np.concatenate(reads + [np.zeros((0, 3), np.int64)])
    assert len(reads) == sum(map(len, parts)) <= len(pieces) + max(workers, 1) - 1


def lognormal_layout(n, seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(48, 81, n // 48 + 1)
    counts = counts[: np.searchsorted(np.cumsum(counts), n)]
    counts = np.append(counts, n - counts.sum())
    return np.cumsum(counts) - counts, counts, np.maximum(rng.lognormal(0, 1, n) * 1000, 1).astype(np.int64)


def test_balanced_batches_keep_steps_even_across_ranks():
    first, count, sizes = lognormal_layout(20_000, seed=11)
    for epoch in range(2):
        table = BlockTable.from_sizes(first, count, sizes)
        res = simulate(table, EpochSpec(8, seed=5, epoch=epoch, balance="size", num_workers=1, batch_size=32))
        assert res["step_imbalance"]["p95"] <= 1.10
        assert res["size_imbalance"] <= 1.02
        plain = simulate(table, EpochSpec(8, seed=5, epoch=epoch, num_workers=1), batch_size=32)
        assert plain["step_imbalance"]["p95"] > 1.3  # what balancing buys
        assert res["epoch_time"] < 0.8 * plain["epoch_time"]


def test_simulate_agrees_with_the_plan():
    first, count, sizes = lognormal_layout(3_000, seed=2)
    res = simulate(BlockTable.from_sizes(first, count, sizes),
                   EpochSpec(4, seed=1, epoch=1, balance="size", num_workers=3, batch_size=16))
    plans = assign_ranks(first, count, 4, seed=1, epoch=1, balance="size", sizes=sizes)
    np.testing.assert_array_equal(res["rank_size"], [sizes[piece_samples(p)].sum() for p in plans])
    steps = res["step_size"]
    assert steps.shape == (-(-750 // 16), 4)  # 750 samples per rank in whole batches of 16 over the workers
    assert res["epoch_time"] == steps.max(axis=1).sum()
    assert res["speedup"] == res["count_epoch_time"] / res["epoch_time"]
    ratio = steps.max(axis=1) / steps.mean(axis=1)
    assert res["step_imbalance"]["max"] == ratio.max()

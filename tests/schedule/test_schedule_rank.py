"""Per-rank planning: one rank's plan agrees with the whole epoch's, reads only what it needs, and keeps
the epoch's guarantees (equal counts, every sample once up to padding, balance never worse than count)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from corgi_io.schedule import (BlockTable, EpochSequence, EpochSpec, assign_ranks, block_order, block_pieces, cut,
                               epoch_plans, piece_counts, piece_samples, piece_sizes, plan_epoch, rank_plan,
                               samples_per_rank, slowest_time, split_workers, unit_cost, worker_share)


class RecordingSizes:
    """Per-sample sizes that remember which samples were read (and refuse reads across blocks)."""

    def __init__(self, sizes, first, count):
        self.sizes, self.first, self.count, self.read = sizes, first, count, set()

    def __getitem__(self, key: slice):
        b = int(np.searchsorted(self.first, key.start, "right")) - 1
        assert key.stop <= self.first[b] + self.count[b], "a read crosses a block boundary"
        self.read.add(b)
        return self.sizes[key]


@st.composite
def tables(draw, max_blocks=60):
    """A BlockTable over 1..200 samples per block, lognormal sizes with a per-block scale."""
    nb = draw(st.integers(1, max_blocks))
    counts = np.array(draw(st.lists(st.integers(1, 200), min_size=nb, max_size=nb)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = np.repeat(rng.lognormal(0, draw(st.sampled_from([0.0, 0.5])), nb), counts)
    sizes = np.maximum(rng.lognormal(6, 1, counts.sum()) * scale, 1).astype(np.int64)
    return BlockTable.from_sizes(np.cumsum(counts) - counts, counts, sizes)


specs = st.builds(EpochSpec, world_size=st.integers(1, 24), seed=st.integers(0, 2**31), epoch=st.integers(0, 30),
                  balance=st.sampled_from(["count", "size"]), drop_last=st.booleans(),
                  shuffle=st.sampled_from(["corgipile", "none"]))


def prefix_of(table):
    return np.concatenate(([0], np.cumsum(table.sizes)))


@settings(max_examples=150, deadline=None)
@given(table=tables(), spec=specs)
def test_count_rank_plan_is_the_slice_of_the_epoch_sequence(table, spec):
    """Count balance: rank r's plan is positions [r*n, (r+1)*n) of the epoch sequence, as before per-rank
    planning (each slice cut from the whole sequence); their union is the whole epoch."""
    spec = dataclasses.replace(spec, balance="count")
    n = samples_per_rank(table.num_samples, spec.world_size, spec.drop_last)
    sequence = block_pieces(block_order(len(table.count), spec.seed, spec.epoch, spec.shuffle_blocks),
                            table.first, table.count)
    for r in range(spec.world_size):
        np.testing.assert_array_equal(rank_plan(table, spec, r), cut(sequence, r * n, (r + 1) * n))
    union = np.concatenate([piece_samples(rank_plan(table, spec, r)) for r in range(spec.world_size)])
    np.testing.assert_array_equal(union, piece_samples(cut(sequence, 0, spec.world_size * n)))


@settings(max_examples=60, deadline=None)
@given(table=tables(), spec=specs)
def test_rank_plan_agrees_with_the_epoch_and_keeps_its_guarantees(table, spec):
    """Every rank's own plan is its row of the whole epoch's; counts are equal; each sample is read once,
    plus the head of the epoch sequence as padding (or less its tail with drop_last)."""
    plans = [rank_plan(table, spec, r) for r in range(spec.world_size)]
    for mine, theirs in zip(plans, epoch_plans(table, spec)):
        np.testing.assert_array_equal(mine, theirs)
    n = samples_per_rank(table.num_samples, spec.world_size, spec.drop_last)
    assert [int(piece_counts(p).sum()) for p in plans] == [n] * spec.world_size
    sequence = EpochSequence.of_epoch(table, spec)
    want = np.ones(table.num_samples, np.int64)
    if spec.drop_last:
        want[piece_samples(sequence.cut(spec.world_size * n, table.num_samples))] = 0
    else:
        np.add.at(want, piece_samples(sequence.cut(table.num_samples, spec.world_size * n)), 1)
    got = np.bincount(np.concatenate([piece_samples(p) for p in plans]), minlength=table.num_samples)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(table=tables(), spec=specs)
def test_size_rank_plans_never_slower_than_count(table, spec):
    prefix, w = prefix_of(table), spec.world_size
    counts = np.full(w, samples_per_rank(table.num_samples, w, spec.drop_last))

    def slowest(balance):
        plans = epoch_plans(table, dataclasses.replace(spec, balance=balance))
        return slowest_time([piece_sizes(p, prefix).sum() for p in plans], counts, unit_cost(w))
    assert slowest("size") <= slowest("count")


@pytest.mark.parametrize("world_size,blocks,scale", [(8, 400, 0.3), (64, 3000, 0.3), (64, 3000, 0.0), (200, 1000, 0.5)])
def test_size_balance_bound_with_block_level_sums(world_size, blocks, scale):
    """Blocks of 64 samples (lognormal sizes, per-block scale): the per-rank size sums end within 2 % of
    each other, while per-sample sizes are read for O(W) blocks: where count slices end, the pieces the
    fill cuts (at most 2 per rank), refine candidates."""
    rng = np.random.default_rng(world_size)
    count = np.full(blocks, 64)
    sizes = np.maximum(rng.lognormal(6, 1, 64 * blocks) * np.repeat(rng.lognormal(0, scale, blocks), 64), 1)
    first = np.arange(0, 64 * blocks, 64)
    table = BlockTable.from_sizes(first, count, sizes.astype(np.int64))
    recorder = RecordingSizes(table.sizes, first, count)
    lazy = dataclasses.replace(table, sizes=recorder)
    for epoch in range(2):
        recorder.read.clear()
        plan = plan_epoch(lazy, EpochSpec(world_size, epoch=epoch, balance="size"))
        assert len(recorder.read) <= 4 * world_size + 2
        loads = np.array([piece_sizes(plan.rank(r), prefix_of(table)).sum() for r in range(world_size)])
        assert loads.max() / loads.mean() <= 1.02


@settings(max_examples=50, deadline=None)
@given(table=tables(), spec=specs)
def test_count_plan_reads_no_sample_sizes(table, spec):
    recorder = RecordingSizes(table.sizes, table.first, table.count)
    lazy = dataclasses.replace(table, size_sum=None, sizes=recorder)
    rank_plan(lazy, dataclasses.replace(spec, balance="count"), spec.world_size - 1)
    assert not recorder.read


@settings(max_examples=100, deadline=None)
@given(table=tables(), spec=specs, points=st.lists(st.integers(0, 10**5), max_size=8))
def test_sequence_size_before_matches_the_samples(table, spec, points):
    sequence, prefix = EpochSequence.of_epoch(table, spec), prefix_of(table)
    want = [piece_sizes(sequence.cut(0, p), prefix).sum() if p else 0 for p in points]
    np.testing.assert_array_equal(sequence.size_before(table, points), np.array(want, np.int64))


@settings(max_examples=100, deadline=None)
@given(table=tables(), workers=st.integers(0, 9), seed=st.integers(0, 100))
def test_worker_share_is_its_part_of_the_split(table, workers, seed):
    pieces = rank_plan(table, EpochSpec(3, seed=seed), seed % 3)
    parts = split_workers(pieces, workers)
    for k, part in enumerate(parts):
        np.testing.assert_array_equal(worker_share(pieces, workers, k), part)
    np.testing.assert_array_equal(np.concatenate([piece_samples(p) for p in parts]), piece_samples(pieces))


@settings(max_examples=60, deadline=None)
@given(table=tables(max_blocks=30), world=st.integers(1, 8), balance=st.sampled_from(["count", "size", "dynamic"]),
       drop_last=st.booleans(), data=st.data())
def test_partitioned_rank_plan(table, world, balance, drop_last, data):
    """With partitions, a rank's own plan is its row of the epoch's, reads only its blocks, and the size
    modes are never slower than count (a rank keeps its size window only when that holds)."""
    owner = np.array(data.draw(st.lists(st.integers(0, world - 1), min_size=len(table.count),
                                        max_size=len(table.count))))
    have = np.bincount(owner, weights=table.count, minlength=world)
    if not drop_last and (have == 0).any():
        return
    spec, cost = EpochSpec(world, seed=3, epoch=1, balance=balance, drop_last=drop_last), np.ones((world, 2))
    plans = epoch_plans(table, spec, cost_model=cost, owner=owner)
    for r, p in enumerate(plans):
        np.testing.assert_array_equal(rank_plan(table, spec, r, cost_model=cost, owner=owner), p)
        assert (owner[p[:, 0]] == r).all()
    prefix, counts = prefix_of(table), [int(piece_counts(p).sum()) for p in plans]
    model = cost if balance == "dynamic" else unit_cost(world)
    count_plans = epoch_plans(table, dataclasses.replace(spec, balance="count"), owner=owner)
    assert slowest_time([piece_sizes(p, prefix).sum() for p in plans], counts, model) <= \
        slowest_time([piece_sizes(p, prefix).sum() for p in count_plans], counts, model)


def test_keyword_api_matches_the_spec_api():
    table = BlockTable.from_sizes([0, 5, 9], [5, 4, 7], np.arange(1, 17))
    spec = EpochSpec(3, seed=4, epoch=2, balance="size", drop_last=True, shuffle="none")
    old = assign_ranks(table.first, table.count, 3, seed=4, epoch=2, balance="size", drop_last=True,
                       sizes=table.sizes, shuffle_blocks=False)
    for a, b in zip(old, epoch_plans(table, spec)):
        np.testing.assert_array_equal(a, b)


def test_epoch_spec_checks_its_fields():
    assert EpochSpec(4).shuffle_blocks and not EpochSpec(4, shuffle="window").shuffle_blocks
    assert EpochSpec(4, drop_last=True).samples_per_rank(10) == 2 and EpochSpec(4).samples_per_rank(10) == 3
    assert EpochSpec(2, seed=1, epoch=3).stream(1, 0)["rank"] == 1
    for bad in ({"world_size": 0}, {"seed": -1}, {"balance": "nope"}, {"shuffle": "nope"}, {"buffer_pieces": 0},
                {"batch_size": 8, "shuffle": "block"}, {"batch_size": 0}):
        with pytest.raises(ValueError):
            EpochSpec(**{"world_size": 2, **bad})
    with pytest.raises(ValueError):
        rank_plan(BlockTable.from_sizes([0], [4]), EpochSpec(2), 2)
    with pytest.raises(ValueError):  # size balance without sizes
        rank_plan(BlockTable.from_sizes([0], [4]), EpochSpec(2, balance="size"), 0)

"""The loader's epoch planner and resume arithmetic as pure properties (`corgi_io.schedule.epoch`, `.resume`).

An epoch is a pass over every sample by ranks x workers; a resume, at any point, with the same world or
another one (and again after that), yields exactly the samples no rank yielded.  `CorgiPileDataset` through
StatefulDataLoader is tested in tests/loaders/test_resume.py.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import assume, given, settings, strategies as st

from corgi_io.schedule import (BlockTable, EpochPlanner, block_pieces, buffer_plan, loader_planner, piece_samples,
                               remainder_pieces, resumed_plan, skip_consumed, worker_counts)

SHUFFLES = ["corgipile", "block", "none", "window", "full"]


def small_plan(counts, shuffle, buffer_pieces, batch_size, seed):
    counts = np.asarray(counts, dtype=np.int64)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    pieces = block_pieces(np.arange(len(counts)), first, counts)
    sizes = np.random.default_rng(seed).integers(1, 100, int(counts.sum()))
    return list(buffer_plan(pieces, shuffle=shuffle, buffer_pieces=buffer_pieces, seed=seed, window_samples=5,
                            sizes=sizes, batch_size=batch_size if shuffle == "corgipile" else None))


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.integers(1, 9), min_size=1, max_size=12),
       shuffle=st.sampled_from(["corgipile", "block", "window", "full"]), buffer_pieces=st.integers(1, 4),
       batch_size=st.sampled_from([None, 1, 3]), seed=st.integers(0, 5), cut=st.floats(0, 1))
def test_skip_consumed_yields_exactly_the_rest_and_reads_what_it_lists(counts, shuffle, buffer_pieces, batch_size,
                                                                        seed, cut):
    plan = small_plan(counts, shuffle, buffer_pieces, batch_size, seed)
    orders = np.concatenate([order for _, order in plan])
    yielded = int(cut * len(orders))
    resumed = skip_consumed(plan, yielded)
    rest = np.concatenate([order for _, order in resumed]) if resumed else np.zeros(0, np.int64)
    assert rest.tolist() == orders[yielded:].tolist()
    read = set()
    for pieces, order in resumed:  # the reader reads a buffer's pieces, then yields its order
        read |= set(piece_samples(pieces).tolist())
        assert set(order.tolist()) <= read
    skipped_whole = sum(len(order) for _, order in plan[:len(plan) - len(resumed)])
    assert len(read) <= len(orders) - skipped_whole + sum(len(o) for _, o in plan) // max(1, len(plan)) * 4 + 16


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(1, 9), min_size=1, max_size=10), seed=st.integers(0, 9))
def test_remainder_is_every_unconsumed_sample_once_in_read_order(counts, seed):
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, dtype=np.int64)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sequence = block_pieces(rng.permutation(len(counts)), first, counts)
    consumed = rng.random(int(counts.sum())) < rng.random()
    rest = remainder_pieces(sequence, consumed)
    ids = piece_samples(rest)
    expected = [i for i in piece_samples(sequence).tolist() if not consumed[i]]
    assert ids.tolist() == expected
    assert all(first[b] <= a < z <= first[b] + counts[b] for b, a, z in rest.tolist())  # runs stay in their block
    untouched = [b for b in range(len(counts)) if not consumed[first[b]:first[b] + counts[b]].any()]
    assert all(((rest[:, 0] == b).sum() == 1) for b in untouched)  # an untouched block stays one piece


# --- the epoch planner and resumes over ranks x workers ---------------------------------------------

@st.composite
def loaders(draw) -> tuple:
    """(a loader's options, its pack's table): what a CorgiPileDataset would plan an epoch with.  Size and
    dynamic balance (without a measured cost model yet) need batches composed by CorgiPile, as in the loader."""
    counts = draw(st.lists(st.integers(1, 9), min_size=1, max_size=10))
    shuffle, batch_size = draw(st.sampled_from(SHUFFLES)), draw(st.sampled_from([None, 1, 3]))
    sized = shuffle == "corgipile" and batch_size is not None
    options = {"shuffle": shuffle, "batch_size": batch_size, "seed": draw(st.integers(0, 5)),
               "buffer_blocks": draw(st.integers(1, 3)),
               "balance": draw(st.sampled_from(["count", "size", "dynamic"] if sized else ["count"]))}
    sizes = np.random.default_rng(options["seed"]).integers(1, 50, sum(counts))
    return options, BlockTable.from_sizes(np.cumsum([0] + counts[:-1]), counts, sizes), draw(st.integers(0, 3))


def planner_of(loader: tuple, world_size: int, drop_last: bool = False) -> EpochPlanner:
    options, table, epoch = loader
    return loader_planner(table, world_size, epoch, drop_last=drop_last, **options)


def orders(plan) -> list:
    """The sample ids a buffer plan yields, in order."""
    return [i for _, order in plan for i in order.tolist()]


def run(planner: EpochPlanner, workers: int, state=None, stop=None) -> tuple:
    """Every (rank, worker)'s yielded samples in `planner`'s world (resuming `state`, as `merge_states` gives
    it), each worker stopping after a fraction `stop` of its samples (the same on every rank: ranks run in
    lockstep), and the state a rank saves then, merged (None when not stopped)."""
    plans = {}
    for rank in range(planner.spec.world_size):
        for worker in range(workers):
            plans[rank, worker] = resumed_plan(planner, rank, worker, workers, state) if state else \
                (planner.plan(rank, worker, workers), [], 0)
    got = {key: orders(plan) for key, (plan, _, _) in plans.items()}
    if stop is None:
        return got, None
    left = [len(got[0, w]) for w in range(workers)]
    assert all(len(got[r, w]) == left[w] for r, w in got)  # lockstep: every rank's worker w yields as many
    taken = {w: int(stop * left[w]) for w in range(workers)}
    saved = {"epoch": planner.spec.epoch, "finished": plans[0, 0][1], "world_size": planner.spec.world_size,
             "num_workers": workers, "yielded": {w: plans[0, w][2] + taken[w] for w in range(workers)}}
    return {key: samples[:taken[key[1]]] for key, samples in got.items()}, saved


@settings(max_examples=120, deadline=None)
@given(loader=loaders(), world=st.integers(1, 4), workers=st.integers(1, 3), drop_last=st.booleans())
def test_an_epoch_is_one_pass_over_every_sample_across_ranks_and_workers(loader, world, workers, drop_last):
    planner = planner_of(loader, world, drop_last)
    got, _ = run(planner, workers)
    seen = Counter(i for samples in got.values() for i in samples)
    num_samples, batch_size = planner.table.num_samples, loader[0]["batch_size"]
    n = planner.spec.samples_per_rank(num_samples)
    if drop_last:
        assert max(seen.values(), default=1) == 1
        assert sum(seen.values()) == world * (n if batch_size is None else n // batch_size * batch_size)
    else:
        assert set(seen) == set(range(num_samples))
        assert sum(seen.values()) == world * n and sum(seen.values()) - num_samples < world  # padding only
    for rank in range(world):
        assert [len(got[rank, w]) for w in range(workers)] == \
            worker_counts(n, workers, batch_size or 1, drop_last).tolist()
        assert sum(len(got[rank, w]) for w in range(workers)) == \
            (planner.rank_items(rank) * (batch_size or 1) if drop_last else n)


@settings(max_examples=120, deadline=None)
@given(loader=loaders(), world=st.integers(1, 4), workers=st.integers(1, 3), stop=st.floats(0, 1),
       again=st.floats(0, 1))
def test_a_resume_in_the_same_world_yields_exactly_what_remained(loader, world, workers, stop, again):
    planner = planner_of(loader, world)
    whole, _ = run(planner, workers)
    before, saved = run(planner, workers, stop=stop)
    after, saved_again = run(planner, workers, saved, stop=again)  # and stopped once more
    rest, _ = run(planner, workers, saved_again)
    for key, samples in whole.items():
        assert before[key] + after[key] + rest[key] == samples  # the same samples, in the same order


@settings(max_examples=120, deadline=None)
@given(loader=loaders(), worlds=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), min_size=2, max_size=3),
       stops=st.lists(st.floats(0, 1), min_size=2, max_size=2))
def test_an_elastic_resume_yields_exactly_the_samples_no_rank_yielded(loader, worlds, stops):
    """Worlds of (ranks, workers) in turn, each another than the one before: each stops partway, the last runs to
    the end of the epoch.  (Within one world a sample may come twice, as padding: see the exact resume above.)"""
    assume(all(old != new for old, new in zip(worlds, worlds[1:])))
    state, yielded = None, []
    for stage, (world, workers) in enumerate(worlds):
        last = stage == len(worlds) - 1
        got, state = run(planner_of(loader, world), workers, state, stop=None if last else stops[stage])
        yielded.append(Counter(i for samples in got.values() for i in samples))
    everything = Counter()
    for stage, seen in enumerate(yielded):
        assert not set(seen) & set(everything)  # no sample an earlier world yielded comes back
        world = worlds[stage][0]
        assert sum(seen.values()) - len(seen) < world  # padding repeats fewer than one sample per rank
        everything.update(seen)
    assert set(everything) == set(range(loader[1].num_samples))  # and none is lost

"""schedule.blend_plan: a blend's epoch planned over ranks x workers as pure code (`blend_planner`, `BlendPlanner`).

An epoch of a blend is a virtual pack of ``samples_per_epoch`` samples (`BlendEpoch`); every rank yields as much,
every virtual id is yielded (padding aside), batches hold each source within one sample of its share, and resumes
(in the same world or another) yield what no rank yielded.
"""
from __future__ import annotations

from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from corgi_io.schedule.blend import epoch_quotas
from corgi_io.schedule.blend_plan import BlendPlanner, blend_planner
from corgi_io.schedule.pieces import piece_samples
from corgi_io.schedule.resume import resumed_plan
from corgi_io.schedule.spec import BlockTable
from helpers.blends import within_one_possible

SHUFFLES = ["corgipile", "block", "none", "window", "full"]


def sized_table(counts, sizes) -> BlockTable:
    counts = np.asarray(counts, np.int64)
    return BlockTable.from_sizes(np.concatenate(([0], np.cumsum(counts)[:-1])), counts, sizes)


@st.composite
def blends(draw, shuffles=tuple(SHUFFLES)) -> dict:
    """The arguments of `blend_planner` but the world: 1-3 small sources with random sizes, weights and options.
    Size balance (as in the loader) needs batches composed by CorgiPile."""
    tables = []
    for s in range(draw(st.integers(1, 3))):
        counts = draw(st.lists(st.integers(1, 9), min_size=1, max_size=8))
        tables.append(sized_table(counts, np.random.default_rng(s).integers(1, 60, sum(counts))))
    weights = np.array(draw(st.lists(st.floats(0.05, 5), min_size=len(tables), max_size=len(tables))))
    shuffle, batch_size = draw(st.sampled_from(shuffles)), draw(st.sampled_from([None, 1, 3, 4]))
    sized = shuffle == "corgipile" and batch_size is not None
    return {"tables": tables, "weights": weights / weights.sum(), "samples_per_epoch": draw(st.integers(1, 120)),
            "epoch": draw(st.integers(0, 3)), "shuffle": shuffle, "buffer_blocks": draw(st.integers(1, 3)),
            "seed": draw(st.integers(0, 5)), "batch_size": batch_size,
            "balance": draw(st.sampled_from(["count", "size"] if sized else ["count"]))}


def planner_of(blend: dict, world_size: int, drop_last: bool = False) -> BlendPlanner:
    return blend_planner(world_size=world_size, drop_last=drop_last, **blend)


def orders(plan) -> list:
    """The virtual ids a buffer plan yields, in order."""
    return [i for _, order in plan for i in order.tolist()]


def everything(planner: BlendPlanner, workers: int) -> dict:
    """(rank, worker) -> the ids it yields over the epoch (`workers=0`: the main process, worker 0)."""
    return {(rank, worker): orders(planner.plan(rank, worker, workers))
            for rank in range(planner.spec.world_size) for worker in range(max(1, workers))}


def expected_totals(blend: dict, world_size: int, drop_last: bool = False) -> np.ndarray:
    """Samples every rank takes of each source: its epoch quota, split evenly (padded, or the tail dropped)."""
    quotas = epoch_quotas(blend["weights"], blend["samples_per_epoch"])
    return quotas // world_size if drop_last else -(-quotas // world_size)



def batches_of(samples: int, batch_size: int | None) -> int:
    return samples if batch_size is None else -(-samples // batch_size)


# --- one epoch -------------------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(blends(), st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_every_rank_yields_rank_items_and_all_ranks_as_many(blend, world, workers, drop_last):
    planner = planner_of(blend, world, drop_last)
    got, batch_size = everything(planner, workers), blend["batch_size"]
    items = planner.rank_items(0)
    totals = expected_totals(blend, world, drop_last)
    samples = totals.sum() if batch_size is None or not drop_last else totals.sum() // batch_size * batch_size
    for rank in range(world):
        assert planner.rank_items(rank) == items
        lengths = [len(got[rank, w]) for w in range(max(1, workers))]
        assert sum(lengths) == samples
        assert sum(batches_of(n, batch_size) for n in lengths) == items  # the DataLoader's batches of each worker
    assert items == batches_of(int(samples), batch_size)


@pytest.mark.parametrize("shuffle", SHUFFLES)
@settings(max_examples=30, deadline=None)
@given(data=st.data(), world=st.integers(1, 4), workers=st.integers(0, 3))
def test_an_epoch_yields_every_virtual_id_and_repeats_only_the_padding(shuffle, data, world, workers):
    blend = data.draw(blends(shuffles=(shuffle,)))
    planner = planner_of(blend, world)
    seen = Counter(i for ids in everything(planner, workers).values() for i in ids)
    quotas = epoch_quotas(blend["weights"], blend["samples_per_epoch"])
    padding = int((world * expected_totals(blend, world) - quotas).sum())
    assert set(seen) == set(range(planner.table.num_samples)) and planner.table.num_samples == quotas.sum()
    assert sum(seen.values()) - planner.table.num_samples == padding
    if padding == 0:
        assert max(seen.values(), default=1) == 1  # exactly once


@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(1, 4), st.integers(0, 3))
def test_with_drop_last_no_virtual_id_is_yielded_twice(blend, world, workers):
    planner = planner_of(blend, world, drop_last=True)
    seen = Counter(i for ids in everything(planner, workers).values() for i in ids)
    assert max(seen.values(), default=1) == 1
    assert set(seen) <= set(range(planner.table.num_samples))


@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_each_buffer_lists_only_ids_read_by_it_or_an_earlier_buffer(blend, world, workers, drop_last):
    planner = planner_of(blend, world, drop_last)
    for rank in range(world):
        for worker in range(max(1, workers)):
            read = set()
            for pieces, order in planner.plan(rank, worker, workers):
                assert np.all(pieces[:, 1] < pieces[:, 2])
                read |= set(piece_samples(pieces).tolist())
                assert set(order.tolist()) <= read


@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(1, 4), st.integers(0, 3), st.booleans(), st.integers(2, 9))
def test_each_batch_holds_the_rows_dealt_to_its_worker_within_one_of_each_share(blend, world, workers, drop_last,
                                                                                 batch_size):
    blend.update(batch_size=batch_size, samples_per_epoch=blend["samples_per_epoch"] * 3)
    planner = planner_of(blend, world, drop_last)
    rows, weights, k = planner.rows(), blend["weights"], max(1, workers)
    possible = within_one_possible(weights, rows.sum(axis=0), rows.sum(axis=1), batch_size)
    if not drop_last:
        assert rows.sum(axis=0).tolist() == expected_totals(blend, world).tolist()
    for (rank, worker), ids in everything(planner, workers).items():
        dealt = rows[worker::k]
        batches = [np.array(ids[j:j + batch_size], np.int64) for j in range(0, len(ids), batch_size)]
        assert len(batches) == len(dealt)
        for batch, row in zip(batches, dealt):
            source, _ = planner.blend.local_ids(batch)
            counts = np.bincount(source, minlength=len(weights))
            assert counts.tolist() == row.tolist()
            if len(batch) == batch_size and possible:
                assert np.all(np.abs(counts - weights * batch_size) <= 1 + 1e-9), (counts, weights * batch_size)


@pytest.mark.parametrize("weights, batch_size", [([0.7, 0.3], None), ([0.7, 0.3], 32), ([0.5, 0.3, 0.2], 16),
                                                 ([0.05, 0.95], None)])
def test_over_a_large_epoch_each_source_gets_its_weight(weights, batch_size):
    rng = np.random.default_rng(0)
    sources = [[7] * 400, [50] * 1000, [13] * 30][:len(weights)]  # 2800, 50000 and 390 samples
    tables = [sized_table(c, rng.integers(1, 200, sum(c))) for c in sources]
    blend = {"tables": tables, "weights": np.array(weights), "samples_per_epoch": 20_000, "epoch": 1,
             "shuffle": "corgipile", "buffer_blocks": 4, "seed": 3, "balance": "count", "batch_size": batch_size}
    planner = planner_of(blend, 2)
    ids = np.array([i for got in everything(planner, 2).values() for i in got], np.int64)
    share = np.bincount(planner.blend.local_ids(ids)[0], minlength=len(weights)) / len(ids)
    assert np.all(np.abs(share - weights) <= 0.005 * np.array(weights)), share


# --- resume ----------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(blends(), st.integers(1, 4), st.integers(0, 3), st.data())
def test_a_resume_in_the_same_world_yields_exactly_the_rest_of_a_workers_plan(blend, world, workers, data):
    rank, worker = data.draw(st.integers(0, world - 1)), data.draw(st.integers(0, max(1, workers) - 1))
    whole = orders(planner_of(blend, world).plan(rank, worker, workers))
    yielded = data.draw(st.integers(0, len(whole)))
    state = {"epoch": blend["epoch"], "finished": [], "world_size": world, "num_workers": workers,
             "yielded": {worker: yielded}}
    plan, finished, already = resumed_plan(planner_of(blend, world), rank, worker, workers, state)
    assert orders(plan) == whole[yielded:] and finished == [] and already == yielded


def run(planner: BlendPlanner, workers: int, state=None, steps=None) -> tuple:
    """Every (rank, worker)'s yielded ids (resuming `state`), stopped after `steps` DataLoader steps in lockstep:
    step j takes worker j % K's next item (a batch, or a sample) on every rank.  Returns them and the merged
    state a rank saves then (None when run to the end)."""
    k, batch_size = max(1, workers), planner.batch_size or 1
    plans = {(rank, w): resumed_plan(planner, rank, w, workers, state) if state else
             (planner.plan(rank, w, workers), [], 0) for rank in range(planner.spec.world_size) for w in range(k)}
    got = {key: orders(plan) for key, (plan, _, _) in plans.items()}
    if steps is None:
        return got, None
    taken = {w: min(len(range(w, steps, k)) * batch_size, len(got[0, w])) for w in range(k)}
    saved = {"epoch": planner.spec.epoch, "finished": plans[0, 0][1], "world_size": planner.spec.world_size,
             "num_workers": workers, "yielded": {w: plans[0, w][2] + taken[w] for w in range(k)}}
    return {key: ids[:taken[key[1]]] for key, ids in got.items()}, saved


def check_elastic(blend: dict, worlds: list, stops: list) -> None:
    """Run `worlds` (ranks, workers >= 1, as the loader records the main process) in turn, each but the last
    stopped after `stops[i]` steps."""
    state, seen = None, Counter()
    for stage, (world, workers) in enumerate(worlds):
        last = stage == len(worlds) - 1
        planner = planner_of(blend, world)
        got, state = run(planner, workers, state, None if last else stops[stage])
        per_rank = {rank: sum(batches_of(len(got[rank, w]), planner.batch_size) for w in range(max(1, workers)))
                    for rank in range(world)}
        assert len(set(per_rank.values())) == 1, per_rank  # every rank yields as many
        now = Counter(i for ids in got.values() for i in ids)
        assert not set(now) & set(seen)  # nothing an earlier world yielded comes back
        seen.update(now)
        if not last:
            assert len(state["finished"]) == stage
    assert set(seen) == set(range(planner.table.num_samples))  # and nothing is lost


@settings(max_examples=60, deadline=None)
@given(blends(), st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), min_size=2, max_size=2, unique=True),
       st.integers(0, 40))
def test_an_elastic_resume_yields_every_virtual_id_no_rank_yielded(blend, worlds, stop):
    check_elastic(blend, worlds, [stop])


@settings(max_examples=40, deadline=None)
@given(blends(), st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), min_size=3, max_size=3),
       st.lists(st.integers(0, 30), min_size=2, max_size=2))
def test_two_elastic_resumes_in_a_row_still_cover_the_epoch(blend, worlds, stops):
    assume(all(old != new for old, new in pairwise(worlds)))
    check_elastic(blend, worlds, stops)


# --- size balance ----------------------------------------------------------------------------------------

def rank_size_ratio(blend: dict, world: int, workers: int) -> float:
    """max / min of the ranks' size sums (the sizes of the virtual ids each yields)."""
    planner = planner_of(blend, world)
    sums = np.zeros(world)
    for (rank, _), ids in everything(planner, workers).items():
        sums[rank] += planner.table.sizes[np.array(ids, np.int64)].sum()
    return sums.max() / sums.min()


def test_size_balance_evens_the_ranks_size_sums_at_least_as_well_as_count_balance():
    ratios = {"count": [], "size": []}
    for seed in range(5):
        rng = np.random.default_rng(seed)
        tables = []
        for counts in (rng.integers(1, 30, 40), rng.integers(1, 20, 60)):
            heavy = np.repeat(rng.random(len(counts)) < 0.2, counts)  # a fifth of the blocks hold huge samples
            tables.append(sized_table(counts, np.where(heavy, rng.integers(500, 5000, counts.sum()),
                                                       rng.integers(1, 50, counts.sum()))))
        for balance, got in ratios.items():
            blend = {"tables": tables, "weights": np.array([0.6, 0.4]), "samples_per_epoch": 1500, "epoch": 0,
                     "shuffle": "corgipile", "buffer_blocks": 4, "seed": seed, "balance": balance, "batch_size": 8}
            got.append(rank_size_ratio(blend, 4, 2))
    assert np.mean(ratios["size"]) <= np.mean(ratios["count"]) + 0.02, ratios

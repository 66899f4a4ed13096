"""Budgeted batches as pure plans: a buffer's cut (exact counts, every sample once, every batch within the budget
or a lone oversized sample), the fewest counts, and `BudgetPlanner`'s epoch (equal steps on every rank and
for any worker count, every sample read, resume at a batch boundary)."""
from __future__ import annotations

import numpy as np
import pytest

from corgi_io.errors import ArgumentError, CorgiError
from corgi_io.schedule import (BATCH_COSTS, BatchBudget, BlockTable, BudgetPlanner, loader_planner, piece_samples,
                               remainder_pieces, skip_consumed)
from corgi_io.schedule.budget_plan import spread

SEEDS = range(6)


def lognormal_sizes(n: int, seed: int, cap: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(np.round(rng.lognormal(np.log(60), 1.0, n)), cap).astype(np.int64) + 1


def within(budget: BatchBudget, sizes: np.ndarray, batch: np.ndarray) -> bool:
    return len(batch) == 1 or budget.model.cost(sizes[batch]) <= budget.limit


@pytest.mark.parametrize("cost", sorted(BATCH_COSTS))
@pytest.mark.parametrize("seed", SEEDS)
def test_a_cut_has_the_count_asked_each_sample_once_and_every_batch_within_budget(cost, seed):
    sizes = lognormal_sizes(300, seed)
    budget = BatchBudget(1500, cost)
    ids = np.arange(1000, 1300)
    fewest = budget.fewest(sizes)
    for count in (fewest, fewest + 1, fewest + 7, len(ids)):
        batches = budget.cut(ids, sizes, count, np.random.default_rng(seed))
        assert len(batches) == count
        assert sorted(np.concatenate(batches).tolist()) == ids.tolist()
        assert all(within(budget, sizes, b - 1000) for b in batches)


@pytest.mark.parametrize("cost", sorted(BATCH_COSTS))
def test_fewer_batches_than_the_fewest_is_refused_and_the_padded_fewest_is_tight(cost):
    sizes = lognormal_sizes(200, 3)
    budget = BatchBudget(1000, cost)
    fewest = budget.fewest(sizes)
    assert fewest >= -(-int(sizes.sum()) // 1000)  # no count beats the total / budget
    with pytest.raises(CorgiError, match="cannot make"):
        budget.cut(np.arange(200), sizes, fewest - 1, np.random.default_rng(0))
    if cost == "padded":  # greedy runs are the fewest: one fewer cannot fit under any cut of the sorted sizes
        desc = np.sort(sizes)[::-1]
        runs, i = 0, 0
        while i < len(desc):
            i, runs = i + max(1, 1000 // desc[i]), runs + 1
        assert fewest == runs


@pytest.mark.parametrize("cost", sorted(BATCH_COSTS))
def test_a_sample_above_the_budget_is_a_batch_of_its_own(cost):
    sizes = np.array([5, 9000, 7, 8, 12000, 6] * 5)
    budget = BatchBudget(100, cost)
    batches = budget.cut(np.arange(30), sizes, budget.fewest(sizes), np.random.default_rng(1))
    big = [b for b in batches if sizes[b].max() > 100]
    assert len(big) == 10 and all(len(b) == 1 for b in big)
    assert all(budget.model.cost(sizes[b]) <= 100 for b in batches if sizes[b].max() <= 100)


def test_padded_batches_group_similar_sizes_and_sum_batches_fill_the_budget():
    sizes = lognormal_sizes(2000, 7)
    padded = BatchBudget(4000, "padded").cut(np.arange(2000), sizes, BatchBudget(4000, "padded").fewest(sizes),
                                            np.random.default_rng(0))
    real = sum(int(sizes[b].sum()) for b in padded)
    assert 1 - real / sum(len(b) * int(sizes[b].max()) for b in padded) < 0.10
    summed = BatchBudget(4000, "sum")
    fills = [sizes[b].sum() / 4000 for b in summed.cut(np.arange(2000), sizes, summed.fewest(sizes),
                                                        np.random.default_rng(0))]
    assert np.median(fills) > 0.9


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": 10, "cost": "max"}, {"limit": 2.5}])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ArgumentError):
        BatchBudget(**bad)


@pytest.mark.parametrize("seed", SEEDS)
def test_spread_gives_every_unit_within_room(seed):
    rng = np.random.default_rng(seed)
    weights, room = rng.integers(1, 50, 9), rng.integers(0, 6, 9)
    extra = int(rng.integers(0, room.sum() + 1))
    give = spread(extra, weights, room)
    assert give.sum() == extra and (give >= 0).all() and (give <= room).all()


def budget_planner(n: int, world: int, *, cost="padded", balance="size", seed=0, epoch=0, drop_last=False,
                   limit=2000, sizes=None) -> BudgetPlanner:
    sizes = lognormal_sizes(n, seed) if sizes is None else sizes
    first = np.arange(0, n, 16)
    table = BlockTable.from_sizes(first, np.minimum(16, n - first), sizes)
    base = loader_planner(table, world, epoch, shuffle="corgipile", buffer_blocks=4, seed=seed, balance=balance,
                          drop_last=drop_last, batch_size=None)
    return BudgetPlanner(base, BatchBudget(limit, cost))


def worker_batches(planner, rank, workers) -> list:
    return [[b for _, b in planner.plan(rank, k, workers)] for k in range(max(1, workers))]


@pytest.mark.parametrize("cost", sorted(BATCH_COSTS))
@pytest.mark.parametrize("balance", ["count", "size"])
@pytest.mark.parametrize("world,workers", [(1, 0), (2, 1), (3, 2), (4, 3)])
def test_every_rank_takes_the_same_steps_for_any_workers_and_reads_every_sample(cost, balance, world, workers):
    n = 1037
    planner = budget_planner(n, world, cost=cost, balance=balance, seed=world)
    sizes, budget = planner.table.sizes, planner.budget
    seen = []
    for rank in range(world):
        per_worker = worker_batches(planner, rank, workers)
        batches = [b for w in per_worker for b in w]
        assert len(batches) == planner.rank_items(rank) == planner.steps()
        assert all(within(budget, sizes, b) for b in batches)
        read = piece_samples(np.concatenate([planner.worker_pieces(rank, k, workers) for k in range(max(1, workers))]))
        assert sorted(read.tolist()) == sorted(np.concatenate(batches).tolist())  # each worker reads what it yields
        seen += np.concatenate(batches).tolist()
    per_rank = -(-n // world)
    assert len(seen) == per_rank * world and set(seen) == set(range(n))  # padding repeats W * n - N samples


def test_the_plan_is_the_same_for_the_same_seed_and_changes_with_the_epoch():
    one = [b.tolist() for b in worker_batches(budget_planner(500, 2), 1, 1)[0]]
    again = [b.tolist() for b in worker_batches(budget_planner(500, 2), 1, 1)[0]]
    other = [b.tolist() for b in worker_batches(budget_planner(500, 2, epoch=1), 1, 1)[0]]
    assert one == again and one != other


def test_drop_last_and_an_empty_rank():
    planner = budget_planner(5, 8, drop_last=True, sizes=np.array([10, 20, 30, 40, 50]))
    assert planner.steps() == 0 and worker_batches(planner, 3, 2) == [[], []]


def test_size_balanced_steps_cost_alike_on_every_rank_under_sum():
    planner = budget_planner(8000, 4, cost="sum", limit=3000, seed=2)
    costs = np.array([[planner.table.sizes[b].sum() for b in worker_batches(planner, r, 1)[0]] for r in range(4)])
    ratio = costs.max(axis=0) / costs.mean(axis=0)
    assert np.percentile(ratio, 95) < 1.1


def test_a_resumed_plan_continues_at_a_batch_boundary():
    planner = budget_planner(700, 2)
    plan = list(planner.plan(0, 0, 1))
    done = sum(len(order) for _, order in plan[:5])
    rest = skip_consumed(plan, done)
    assert [o.tolist() for _, o in rest] == [o.tolist() for _, o in plan[5:]]
    needed = np.concatenate([o for _, o in rest])
    read = piece_samples(np.concatenate([p for p, _ in rest]))
    assert set(needed.tolist()) <= set(read.tolist())  # the pieces of every batch still listed are read again


def test_a_remainder_planned_for_another_world_keeps_equal_steps():
    planner = budget_planner(900, 3)
    consumed = np.zeros(900, bool)
    consumed[np.concatenate(worker_batches(planner, 0, 1)[0][:4])] = True
    runs = remainder_pieces(planner.sequence(), consumed)
    resumed = planner.for_world(2, runs)
    counts = [sum(len(b) for b in worker_batches(resumed, r, 2)) for r in range(2)]
    assert counts == [resumed.steps()] * 2
    left = {int(i) for r in range(2) for w in worker_batches(resumed, r, 2) for b in w for i in b}
    assert left == set(np.flatnonzero(~consumed).tolist())

"""Blocks -> ranks: every rank gets exactly the same number of samples.

All modes cut the same epoch sequence (the blocks in ``block_order``, sample
after sample, repeated periodically for padding): the first ``W * n``
positions. So the multiset of samples read in an epoch is the same in every
mode; only who reads what differs. See docs/algorithms.md.

``plan_epoch`` does the part every rank shares (O(B) for count balance; the
block-level placement for the size modes); ``.rank(r)`` then extracts one
rank's pieces. ``rank_plan`` is the two together: what a rank computes once per
epoch, and hands its workers.
"""
from __future__ import annotations

import functools

import numpy as np

from corgi_io.errors import ArgumentError

from corgi_io.schedule.balance import rank_budgets, size_plan
from corgi_io.schedule.cost import unit_cost
from corgi_io.schedule.modes import BALANCES
from corgi_io.schedule.epoch_order import BALANCE, epoch_rng
from corgi_io.schedule.partition import partition_plan
from corgi_io.schedule.epoch_sequence import CountPlan, EpochSequence
from corgi_io.schedule.spec import BlockTable, EpochSpec


def plan_epoch(table: BlockTable, spec: EpochSpec, *, cost_model=None, owner=None):
    """The epoch's assignment, as an object whose ``.rank(r)`` gives rank r's pieces
    (int64 (P, 3) rows ``(block, start, stop)``, in read order) and ``.ranks()`` all of them.

    Every rank gets exactly ``n = spec.samples_per_rank(N)`` samples. Without ``drop_last``
    every sample is read at least once and the ``W * n - N`` extra reads repeat the head of
    the epoch sequence (padding); with it, ``N - W * n`` samples at the tail of the epoch
    sequence are skipped and none repeats.

    ``spec.balance``:
      - ``"count"``: rank r takes positions ``[r*n, (r+1)*n)`` of the epoch sequence
        (CorgiPile's contiguous slice, made sample-exact); O(B), no sizes read;
      - ``"size"``: the same samples placed so that the per-rank size sums are as equal as
        possible (never worse than ``"count"``);
      - ``"dynamic"``: per-rank size budgets that equalise predicted time
        ``a_r * size + b_r * n`` under ``cost_model`` (float (W, 2)).

    ``owner``: optional int array, one rank per block (partitions); a rank then reads only
    its own blocks, and ``n`` becomes the largest partition's count (padding repeats the
    rank's own samples) or, with ``drop_last``, the smallest one's.
    """
    w, mode = spec.world_size, BALANCES[spec.balance]
    if mode.by_size and table.size_sum is None:
        raise ArgumentError(f"balance={spec.balance!r} needs sizes")
    if mode.measured_cost and cost_model is None:
        raise ArgumentError(f"balance={spec.balance!r} needs cost_model")
    cost = np.asarray(cost_model, np.float64) if mode.measured_cost else unit_cost(w)
    model = cost_model if mode.measured_cost else None
    budgets_for = functools.partial(rank_budgets, cost_model=model, world_size=w)  # (total size, n) -> budgets
    if owner is not None:
        return partition_plan(table, spec, owner, budgets_for, cost)
    by_count = CountPlan(EpochSequence.of_epoch(table, spec), spec.samples_per_rank(table.num_samples), w)
    if not mode.by_size or by_count.n == 0 or w == 1:
        return by_count
    tiebreak = epoch_rng(spec.seed, spec.epoch, BALANCE).permutation(w)
    return size_plan(table, by_count, budgets_for, cost, tiebreak)


def rank_plan(table: BlockTable, spec: EpochSpec, rank: int, *, cost_model=None, owner=None) -> np.ndarray:
    """One rank's pieces of the epoch (see ``plan_epoch``): compute it once per rank and epoch
    and give each worker its share (``worker_share``)."""
    if not 0 <= rank < spec.world_size:
        raise ArgumentError(f"rank must be in [0, {spec.world_size}), got {rank}")
    return plan_epoch(table, spec, cost_model=cost_model, owner=owner).rank(rank)


def epoch_plans(table: BlockTable, spec: EpochSpec, *, cost_model=None, owner=None) -> list[np.ndarray]:
    """Every rank's pieces (for simulations and reports: a loader needs only ``rank_plan``)."""
    return plan_epoch(table, spec, cost_model=cost_model, owner=owner).ranks()


def assign_ranks(block_first, block_count, world_size: int, *, seed: int, epoch: int,
                 balance: str = "count", drop_last: bool = False, sizes=None,
                 cost_model=None, partitions=None, shuffle_blocks: bool = True) -> list[np.ndarray]:
    """Every rank's pieces, from plain arrays: the keyword form of ``epoch_plans`` (``sizes``
    per sample, in memory; ``partitions`` the block owners; ``shuffle_blocks=False`` reads
    blocks in stored order)."""
    table = BlockTable.from_sizes(block_first, block_count, sizes)
    spec = EpochSpec(world_size, seed=seed, epoch=epoch, balance=balance, drop_last=drop_last,
                     shuffle="corgipile" if shuffle_blocks else "none")
    return epoch_plans(table, spec, cost_model=cost_model, owner=partitions)

"""Pure planning core of the loader: numpy in, numpy out, no I/O, no torch.

An epoch plan is a function of a `BlockTable` (per block: first sample, count,
size sum; per-sample sizes read lazily) and a frozen `EpochSpec` (seed, epoch,
world size, balance, shuffle...). It is made in three cuts, each deterministic:

    rank_plan      blocks -> one rank's pieces (exactly equal sample counts)
    worker_share   a rank's pieces -> one worker's pieces (counts depend on n, K only)
    buffer_plan    a worker's pieces -> (pieces to read, sample ids to yield) per buffer

A rank computes only its own pieces (count balance: O(B); size balance: a
block-level placement every rank computes alike), once per epoch, and hands
each worker its share. A piece is a row ``(block, start, stop)``: a contiguous
range of global sample ids inside one block, read with one ranged read. See
docs/algorithms.md.

A loader holds one `Planner` per epoch (`corgi_io.schedule.planner`; for a pack the
`EpochPlanner` of `loader_planner`: the three cuts, each rank's pieces kept once planned);
`resumed_plan` continues an interrupted epoch from a saved state, in the same world or another one.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names as `_EXPORTS`, for editors and type checkers (a test keeps the two equal)
    from corgi_io.schedule.assign import assign_ranks, epoch_plans, plan_epoch, rank_plan
    from corgi_io.schedule.balance import rank_budgets
    from corgi_io.schedule.batches import balanced_batches
    from corgi_io.schedule.budget import BATCH_COSTS, BatchBudget
    from corgi_io.schedule.budget_plan import BudgetPlanner
    from corgi_io.schedule.cost import fit_cost, keep_if_faster, slowest_time, unit_cost
    from corgi_io.schedule.epoch import EpochPlanner, loader_planner
    from corgi_io.schedule.epoch_sequence import EpochSequence
    from corgi_io.schedule.modes import BALANCE_MODES, BALANCES, SHUFFLE_MODES, SHUFFLES
    from corgi_io.schedule.epoch_order import block_order, epoch_rng
    from corgi_io.schedule.partition import block_owners
    from corgi_io.schedule.planner import Planner, SamplePlanner
    from corgi_io.schedule.pieces import (
        block_pieces, cut, merge_adjacent, piece_counts, piece_samples, piece_sizes, positions)
    from corgi_io.schedule.resume import (
        consumed_samples, find_states, merge_states, pack_fingerprint, remainder_pieces, remaining_pieces,
        resumed_plan, segment_consumed, skip_consumed, worker_state)
    from corgi_io.schedule.simulation import imbalance, rank_batches, simulate
    from corgi_io.schedule.spec import BlockTable, EpochSpec, samples_per_rank
    from corgi_io.schedule.stream import buffer_plan
    from corgi_io.schedule.workers import batch_count, split_workers, worker_counts, worker_share


_EXPORTS = {  # public name -> its module, imported on first use
    "assign_ranks": "assign",
    "epoch_plans": "assign",
    "plan_epoch": "assign",
    "rank_plan": "assign",
    "rank_budgets": "balance",
    "balanced_batches": "batches",
    "BATCH_COSTS": "budget",
    "BatchBudget": "budget",
    "BudgetPlanner": "budget_plan",
    "fit_cost": "cost",
    "keep_if_faster": "cost",
    "slowest_time": "cost",
    "unit_cost": "cost",
    "EpochPlanner": "epoch",
    "loader_planner": "epoch",
    "BALANCES": "modes",
    "BALANCE_MODES": "modes",
    "SHUFFLES": "modes",
    "SHUFFLE_MODES": "modes",
    "block_order": "epoch_order",
    "epoch_rng": "epoch_order",
    "block_owners": "partition",
    "Planner": "planner",
    "SamplePlanner": "planner",
    "block_pieces": "pieces",
    "cut": "pieces",
    "merge_adjacent": "pieces",
    "piece_counts": "pieces",
    "piece_samples": "pieces",
    "piece_sizes": "pieces",
    "positions": "pieces",
    "consumed_samples": "resume",
    "find_states": "resume",
    "merge_states": "resume",
    "pack_fingerprint": "resume",
    "remainder_pieces": "resume",
    "remaining_pieces": "resume",
    "resumed_plan": "resume",
    "segment_consumed": "resume",
    "skip_consumed": "resume",
    "worker_state": "resume",
    "EpochSequence": "epoch_sequence",
    "imbalance": "simulation",
    "rank_batches": "simulation",
    "simulate": "simulation",
    "BlockTable": "spec",
    "EpochSpec": "spec",
    "samples_per_rank": "spec",
    "buffer_plan": "stream",
    "batch_count": "workers",
    "split_workers": "workers",
    "worker_counts": "workers",
    "worker_share": "workers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import a public name's module when the name is first used, so that `corgi_io.schedule.modes`
    (the registries the CLI lists) loads without numpy and the planning modules: importing them all here
    took `corgi plan --help` from 110 to 260 ms (numpy) and `import corgi_io.schedule` from 1.5 to 120+ ms."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})

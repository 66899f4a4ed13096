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
"""
from corgi_io.schedule.assign import assign_ranks, epoch_plans, plan_epoch, rank_plan
from corgi_io.schedule.balance import rank_budgets
from corgi_io.schedule.batches import balanced_batches
from corgi_io.schedule.cost import fit_cost, keep_if_faster, slowest_time, unit_cost
from corgi_io.schedule.order import block_order, epoch_rng
from corgi_io.schedule.pieces import block_pieces, cut, merge_adjacent, piece_counts, piece_samples, piece_sizes, positions
from corgi_io.schedule.simulate import imbalance, rank_batches, simulate
from corgi_io.schedule.modes import BALANCE_MODES, SHUFFLE_MODES, check_mode
from corgi_io.schedule.sequence import EpochSequence
from corgi_io.schedule.spec import BlockTable, EpochSpec, samples_per_rank
from corgi_io.schedule.stream import buffer_plan
from corgi_io.schedule.workers import split_workers, worker_counts, worker_share

__all__ = [
    "BALANCE_MODES", "SHUFFLE_MODES", "BlockTable", "EpochSequence", "EpochSpec",
    "assign_ranks", "balanced_batches", "block_order", "block_pieces", "buffer_plan", "check_mode", "cut",
    "epoch_plans", "epoch_rng", "fit_cost", "imbalance", "keep_if_faster", "merge_adjacent", "piece_counts",
    "piece_samples", "piece_sizes", "plan_epoch", "positions", "rank_batches", "rank_budgets", "rank_plan",
    "samples_per_rank", "simulate", "slowest_time", "split_workers", "unit_cost", "worker_counts", "worker_share",
]

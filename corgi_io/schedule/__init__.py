"""Pure planning core of the loader: numpy in, numpy out, no I/O, no torch.

An epoch plan is made in three cuts, each a deterministic function of arrays
and ``(seed, epoch, ...)``:

    assign_ranks   blocks -> per-rank pieces (exactly equal sample counts)
    split_workers  a rank's pieces -> per-worker pieces (counts depend on n, K only)
    buffer_plan    a worker's pieces -> (pieces to read, sample ids to yield) per buffer

A piece is a row ``(block, start, stop)``: a contiguous range of global sample
ids inside one block, read with one ranged read. See docs/algorithms.md.
"""
from .assign import assign_ranks, rank_time, samples_per_rank
from .balance import rank_budgets
from .batches import balanced_batches
from .cost import fit_cost
from .order import block_order, epoch_rng
from .pieces import block_pieces, cut, merge_adjacent, piece_samples
from .simulate import imbalance, rank_batches, simulate
from .modes import BALANCE_MODES, SHUFFLE_MODES, check_mode
from .stream import buffer_plan
from .workers import split_workers, worker_counts

__all__ = [
    "BALANCE_MODES", "SHUFFLE_MODES",
    "assign_ranks", "balanced_batches", "block_order", "block_pieces", "buffer_plan", "check_mode", "cut",
    "epoch_rng", "fit_cost", "imbalance", "merge_adjacent", "piece_samples", "rank_batches", "rank_budgets", "rank_time",
    "samples_per_rank", "simulate", "split_workers", "worker_counts",
]

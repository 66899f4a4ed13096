"""One epoch of a loader as a pure planner: a rank's pieces, a worker's share, a worker's buffer plan.

`EpochPlanner` is what a loader builds once per epoch (and again only when the epoch or the
cost model changes; `loader_planner` makes it from the loader's options): the pack's
`BlockTable`, the epoch's frozen `EpochSpec`, the cost model under dynamic balance and the
block owners under partitions.  It plans each rank once and keeps the result, so every worker
of a rank cuts its share from the same pieces.  For a resume (`corgi_io.schedule.resume`) it
also plans the same epoch for another world, and the *remainder* of an interrupted epoch:
runs of samples planned as if each were a block.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from corgi_io.errors import ArgumentError
from corgi_io.schedule.assign import plan_epoch
from corgi_io.schedule.modes import BALANCES, SHUFFLES
from corgi_io.schedule.epoch_order import block_order
from corgi_io.schedule.pieces import block_pieces, piece_counts
from corgi_io.schedule.planner import SamplePlanner
from corgi_io.schedule.resume import resumed_plan
from corgi_io.schedule.spec import BlockTable, EpochSpec
from corgi_io.schedule.stream import buffer_plan
from corgi_io.schedule.workers import batch_count, worker_share


def window_samples(table: BlockTable, buffer_blocks: int) -> int:
    """The sliding buffer of shuffle="window": as many samples as `buffer_blocks` average blocks (at least 1), so
    that the baseline holds as much as a CorgiPile buffer of `buffer_blocks` blocks."""
    return max(1, int(buffer_blocks * table.count.mean())) if len(table.count) else 1


@dataclass(frozen=True, eq=False)
class EpochPlanner(SamplePlanner):
    """The plans of one epoch for a world of ``spec.world_size`` ranks.

    ``batch_size``: the loader's batches (None: samples); each worker gets whole batches
    (``worker_share``), whatever the shuffle (``spec.batch_size`` composes them only under
    "corgipile").  ``runs``: None, or rows ``(block, start, stop)`` planned as if each were a
    block: a resume's remainder (count-balanced), or one source's share of a blend's epoch
    (`corgi_io.schedule.blend_plan`).  ``rank_cache`` holds each rank's pieces once planned.
    """

    counts_items = False  # resume counts samples, not plan items
    table: BlockTable
    spec: EpochSpec
    batch_size: int | None = None
    cost_model: object = None  # per rank (a, b), under balance="dynamic"
    owner: np.ndarray | None = None  # per block its rank, under partitions
    runs: np.ndarray | None = None
    rank_cache: dict = field(default_factory=dict, repr=False)

    def for_world(self, world_size: int, runs: np.ndarray | None = None) -> "EpochPlanner":
        """The same epoch planned for `world_size` ranks (this planner itself for its own world), or, given
        `runs`, the planner of that remainder of it (count balance; no cost model, no owners)."""
        if runs is None:
            return self if world_size == self.spec.world_size else \
                replace(self, spec=replace(self.spec, world_size=world_size), rank_cache={})
        return replace(self, spec=replace(self.spec, world_size=world_size, balance="count"), cost_model=None,
                       owner=None, runs=runs, rank_cache={})

    def sequence(self) -> np.ndarray:
        """The epoch's blocks as whole pieces, in the epoch's block order (what a remainder is cut from)."""
        order = block_order(len(self.table.count), self.spec.seed, self.spec.epoch, self.spec.shuffle_blocks)
        return block_pieces(order, self.table.first, self.table.count)

    def rank_pieces(self, rank: int) -> np.ndarray:
        """Rank `rank`'s pieces (rows (block, start, stop), read order), planned on the first call only."""
        if rank not in self.rank_cache:
            if not 0 <= rank < self.spec.world_size:
                raise ArgumentError(f"rank must be in [0, {self.spec.world_size}), got {rank}")
            self.rank_cache[rank] = self._to_blocks(self._assignment().rank(rank))
        return self.rank_cache[rank]

    def every_rank_pieces(self) -> list:
        """Every rank's pieces, from one placement of the epoch (what a plan that must agree across ranks
        reads, such as budgeted batches' step count), kept as `rank_pieces` keeps them."""
        if len(self.rank_cache) < self.spec.world_size:
            for rank, pieces in enumerate(self._assignment().ranks()):
                self.rank_cache.setdefault(rank, self._to_blocks(pieces))
        return [self.rank_cache[rank] for rank in range(self.spec.world_size)]

    def _assignment(self):
        """`plan_epoch` of the epoch, or of the remainder with its runs as blocks."""
        if self.runs is None:
            return plan_epoch(self.table, self.spec, cost_model=self.cost_model, owner=self.owner)
        runs, by_size = self.runs, BALANCES[self.spec.balance].by_size
        table = BlockTable(runs[:, 1], runs[:, 2] - runs[:, 1], self.table.sizes_of(runs) if by_size else None,
                           self.table.sizes)
        return plan_epoch(table, self.spec, cost_model=self.cost_model)

    def _to_blocks(self, pieces: np.ndarray) -> np.ndarray:
        """Pieces of the assignment as pieces of the pack: a remainder's rows name runs, mapped to their blocks."""
        if self.runs is None or not len(pieces):
            return pieces
        return np.column_stack([self.runs[pieces[:, 0], 0], pieces[:, 1:]])

    def worker_pieces(self, rank: int, worker: int, num_workers: int) -> np.ndarray:
        """The pieces one of a rank's `num_workers` DataLoader workers reads: whole batches with `batch_size`,
        for all but at most one worker."""
        return worker_share(self.rank_pieces(rank), num_workers, worker, self.batch_size or 1, self.spec.drop_last)

    def plan(self, rank: int, worker: int, num_workers: int):
        """The buffer plan of one worker of a rank: (pieces to read, sample ids to yield) per buffer (`buffer_plan`)."""
        sums = self.table.sizes_of if self.table.size_sum is not None else None
        return buffer_plan(self.worker_pieces(rank, worker, num_workers), sizes=self.table.sizes, piece_sums=sums,
                           **self.spec.stream(rank, worker))

    def rank_items(self, rank: int) -> int:
        """What every rank yields per epoch: samples, or batches with `batch_size`.  Without owners it needs no
        plan; with them it is the largest partition's count (the smallest with drop_last), as the plan has it."""
        if self.owner is None:
            samples = self.spec.samples_per_rank(self.table.num_samples)
        else:
            samples = int(piece_counts(self.rank_pieces(rank)).sum())
        return samples if self.batch_size is None else batch_count(samples, self.batch_size, self.spec.drop_last)

    resumed_plan = resumed_plan  # `corgi_io.schedule.resume.resumed_plan`, this planner its first argument

    def portable(self) -> "EpochPlanner":
        """This planner without its table (a copy reopens the manifest's), its planned ranks kept."""
        return replace(self, table=None)


def loader_planner(table: BlockTable, world_size: int, epoch: int, *, shuffle: str, buffer_blocks: int, seed: int,
                   balance: str, drop_last: bool, batch_size: int | None, group_by_size: bool = False, cost_model=None,
                   owner=None) -> EpochPlanner:
    """The planner of one epoch of a loader with these options (`CorgiPileDataset`'s), over the pack's `table`.

    The loader's batches are composed inside buffers only where the shuffle can (CorgiPile); elsewhere they
    are runs of samples, still whole per worker.  A balance that needs a measured cost model (dynamic) plans
    by size while there is none yet (the first epoch, or no process group).  `group_by_size` groups each
    buffer's batches by size instead of balancing them.
    """
    unmeasured = BALANCES[balance].measured_cost and cost_model is None
    spec = EpochSpec(world_size, seed=seed, epoch=int(epoch), balance="size" if unmeasured else balance,
                     drop_last=drop_last, shuffle=shuffle, buffer_pieces=buffer_blocks,
                     window_samples=window_samples(table, buffer_blocks),
                     batch_size=batch_size if SHUFFLES[shuffle].composes_batches else None,
                     group_by_size=group_by_size)
    return EpochPlanner(table, spec, batch_size, cost_model, owner)

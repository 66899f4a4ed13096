"""The planner interface: what the loader and resume read of one epoch's planner, named once.

Every planner subclasses the Protocol it implements, so the declaration is visible and a new
member is a test failure until each planner has it (tests/schedule/test_planner_protocol.py):

    Planner         what `CorgiPileDataset` and its `ResumePoint` use: RowPlanner (token rows)
    SamplePlanner   a Planner whose units are samples of a `table`, resumed by the arithmetic of
                    `corgi_io.schedule.resume`, which also needs `for_world` and `sequence`:
                    EpochPlanner, BlendPlanner, BudgetPlanner

A plan is an iterable of items, one per buffer (or batch, or row range); a rank's *pieces* are
rows ``(block, start, stop)`` of the planner's table.  No I/O, no torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from corgi_io.schedule.spec import BlockTable, EpochSpec


class Planner(Protocol):
    """One epoch of a loader planned for ``spec.world_size`` ranks, each rank planned once and kept."""

    counts_items: bool
    """Whether a saved progress counts whole plan items (budgeted batches) rather than the samples or rows
    the worker yielded."""

    spec: EpochSpec
    """The epoch's frozen `EpochSpec`: its epoch and world size say which plan this is."""

    cost_model: object
    """Per rank its fitted speed (a, b) under balance="dynamic", else None: the loader replans when it changes."""

    def rank_items(self, rank: int) -> int:
        """What every rank yields per epoch (samples, batches or rows): the dataset's ``len()``."""

    def rank_pieces(self, rank: int) -> np.ndarray:
        """Rank `rank`'s pieces in read order, planned on the first call only."""

    def worker_pieces(self, rank: int, worker: int, num_workers: int) -> np.ndarray:
        """The pieces one of a rank's `num_workers` DataLoader workers reads."""

    def plan(self, rank: int, worker: int, num_workers: int):
        """One worker's plan of the whole epoch, item by item, in yield order."""

    def resumed_plan(self, rank: int, worker: int, num_workers: int, resume: dict) -> tuple:
        """(plan, finished segments, units already yielded) of one worker continuing the saved point `resume`
        (`merge_states`) of this epoch; ResumeError where this planner cannot continue it."""

    def portable(self) -> Planner | None:
        """This planner as a copy of the dataset carries it (spawned workers, deepcopy): without its `table`,
        which the copy puts back from its reopened manifest (``dataclasses.replace(table=...)``), so the rank
        planned at `set_epoch` comes along; None where the copy plans anew."""


class SamplePlanner(Planner, Protocol):
    """A Planner whose units are the samples of `table`; its resume replans any world (`corgi_io.schedule.resume`)."""

    table: BlockTable
    """The pack's (or a blend's virtual pack's) `BlockTable`: what resume counts samples of."""

    def for_world(self, world_size: int, runs: np.ndarray | None = None) -> SamplePlanner:
        """The same epoch planned for `world_size` ranks or, given `runs` (pieces of the table), the planner of
        that remainder of it."""

    def sequence(self) -> np.ndarray:
        """The epoch's distinct samples as whole pieces in read order: what a remainder is cut from."""

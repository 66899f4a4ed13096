"""schedule/planner.py: every planner declares the Protocol it implements and implements each of its members,
found by introspection (a member added to a Protocol fails here until every planner has it); what a planner
carries into a copy of the dataset (`portable`); one closing of an interrupted segment for samples and rows."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import fields, is_dataclass
from typing import Generic, Protocol

import numpy as np
import pytest

import corgi_io.schedule
from corgi_io.errors import ResumeError
from corgi_io.schedule import BatchBudget, BlockTable, BudgetPlanner, EpochPlanner, loader_planner, piece_samples
from corgi_io.schedule.blend_plan import BlendPlanner, blend_planner
from corgi_io.schedule.planner import Planner, SamplePlanner
from corgi_io.schedule.resume import closed_segments
from corgi_io.schedule.token_rows import RowOptions, RowPlanner


def protocol_members(protocol) -> set:
    """The names a Protocol declares, its bases' included: annotated attributes and public methods."""
    return {name for klass in protocol.__mro__ if klass not in (protocol.__mro__[-1], Protocol, Generic)
            for name, value in {**vars(klass).get("__annotations__", {}), **vars(klass)}.items()
            if not name.startswith("_") and (name in vars(klass).get("__annotations__", {}) or callable(value))}


def implements(cls, name: str) -> bool:
    """Whether `cls` gives `name` itself (a method, property or class attribute of a class that is not a
    Protocol, or a dataclass field), rather than inheriting the Protocol's stub."""
    if is_dataclass(cls) and name in {f.name for f in fields(cls)}:
        return True
    owner = next((klass for klass in cls.__mro__ if name in vars(klass)), None)
    return owner is not None and not vars(owner).get("_is_protocol", False)


def planner_classes() -> set:
    """Every concrete class of the schedule package that declares a planner Protocol."""
    for module in pkgutil.iter_modules(corgi_io.schedule.__path__):
        importlib.import_module(f"corgi_io.schedule.{module.name}")
    found, todo = set(), [Planner]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if not vars(sub).get("_is_protocol", False):
                found.add(sub)
    return found


def test_the_four_planners_declare_their_protocol():
    assert planner_classes() == {EpochPlanner, BlendPlanner, BudgetPlanner, RowPlanner}
    assert all(SamplePlanner in cls.__mro__ for cls in (EpochPlanner, BlendPlanner, BudgetPlanner))
    assert {"table", "for_world", "sequence"} <= protocol_members(SamplePlanner) - protocol_members(Planner)
    assert {"spec", "counts_items", "plan", "resumed_plan", "portable"} <= protocol_members(Planner)


@pytest.mark.parametrize("cls", sorted(planner_classes(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_planner_implements_every_member_of_its_protocol(cls):
    protocol = SamplePlanner if SamplePlanner in cls.__mro__ else Planner
    missing = sorted(name for name in protocol_members(protocol) if not implements(cls, name))
    assert missing == [], f"{cls.__name__} lacks {missing} of {protocol.__name__}"


def test_a_stub_left_to_the_protocol_counts_as_missing():
    class Partial(Planner):
        counts_items = False

        def plan(self, rank, worker, num_workers):
            return []

    assert implements(Partial, "plan") and implements(Partial, "counts_items")
    assert not implements(Partial, "worker_pieces") and not implements(Partial, "spec")


def table(n: int = 40, block: int = 5) -> BlockTable:
    first = np.arange(0, n, block)
    return BlockTable.from_sizes(first, np.minimum(block, n - first), np.arange(1, n + 1) % 7 + 1)


def samples(world_size: int = 2, batch_size=None) -> EpochPlanner:
    return loader_planner(table(), world_size, 0, shuffle="corgipile", buffer_blocks=2, seed=3, balance="count",
                          drop_last=False, batch_size=batch_size)


def test_only_a_packs_planner_crosses_to_a_copy_without_its_table_and_with_its_planned_ranks():
    planner = samples()
    pieces = planner.rank_pieces(1)
    portable = planner.portable()
    assert portable.table is None and portable.rank_cache[1] is pieces
    blend = blend_planner([table(), table(20)], [0.5, 0.5], 30, 2, 0, shuffle="corgipile", buffer_blocks=2, seed=0,
                          balance="count", drop_last=False, batch_size=None)
    others = (blend, BudgetPlanner(planner, BatchBudget(20, "padded")), RowPlanner(planner, RowOptions(8)))
    assert [other.portable() for other in others] == [None, None, None]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_row_workers_pieces_hold_the_documents_of_its_rows(workers):
    rows = RowPlanner(samples(), RowOptions(8, eos=True))
    rank_ids = set(piece_samples(rows.rank_pieces(0)).tolist())
    read = set()
    for worker in range(workers):
        pieces = rows.worker_pieces(0, worker, workers)
        read |= set(piece_samples(pieces).tolist())
    assert set(rows.streams[0].ids.tolist()) <= read <= rank_ids


def test_samples_and_rows_close_an_interrupted_segment_alike():
    partial = {"finished": [], "yielded": {0: 4}, "num_workers": 2, "world_size": 2, "epoch": 0}
    with pytest.raises(ResumeError, match="1 of 2 workers' progress") as by_samples:
        samples().resumed_plan(0, 0, 3, partial)
    with pytest.raises(ResumeError) as by_rows:
        RowPlanner(samples(), RowOptions(8)).resumed_plan(0, 0, 3, partial)
    assert str(by_rows.value) == str(by_samples.value) and "\n" not in str(by_samples.value)
    whole = {**partial, "yielded": {0: 4, 1: 3}}
    assert closed_segments(whole) == [{"world_size": 2, "num_workers": 2, "yielded": [4, 3]}]

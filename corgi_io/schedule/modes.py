"""The registries of load modes: every shuffle mode and every balance mode, by name.

A mode is chosen with `corgi_io.arguments.choose`, whose error lists the choices; the CLI offers
the same names.  A new shuffle mode is one `ShuffleMode` entry and its stream function; a new
balance mode is one `BalanceMode` entry describing what `plan_epoch` does.  This module imports
nothing heavy (a shuffle names its stream function, imported on first use), so `corgi plan --help`
lists the modes without loading numpy.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ShuffleMode:
    """One shuffle mode: where its stream comes from, and what the rest of the plan needs to know."""

    stream: str             # "module:function", called as function(pieces, StreamArgs) -> (pieces, order) pairs
    shuffles_blocks: bool   # the epoch reads blocks in a seeded order (False: the stored order)
    composes_batches: bool  # size-balanced batches can be composed inside its buffers

    def stream_function(self):
        """The stream function itself (imported here, on first use)."""
        module, _, name = self.stream.partition(":")
        return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class BalanceMode:
    """How ranks share an epoch's samples (every rank always gets the same number of them)."""

    by_size: bool        # place samples so that the per-rank size sums meet per-rank budgets
    measured_cost: bool  # budgets from each rank's measured cost model (a, b) instead of equal ones


_STREAM = "corgi_io.schedule.stream"
SHUFFLES = {
    "corgipile": ShuffleMode(f"{_STREAM}:corgipile_stream", shuffles_blocks=True, composes_batches=True),
    "block": ShuffleMode(f"{_STREAM}:in_order_stream", shuffles_blocks=True, composes_batches=False),
    "none": ShuffleMode(f"{_STREAM}:in_order_stream", shuffles_blocks=False, composes_batches=False),
    "window": ShuffleMode(f"{_STREAM}:window_stream", shuffles_blocks=False, composes_batches=False),
    "full": ShuffleMode(f"{_STREAM}:full_stream", shuffles_blocks=True, composes_batches=False),
}
BALANCES = {
    "count": BalanceMode(by_size=False, measured_cost=False),
    "size": BalanceMode(by_size=True, measured_cost=False),
    "dynamic": BalanceMode(by_size=True, measured_cost=True),
}
SHUFFLE_MODES = tuple(SHUFFLES)
BALANCE_MODES = tuple(BALANCES)

"""`dataset.stats.watch(loader)`: the training loop around a loader, timed, and the stage totals written out.

Put it outermost, around `to_device(...)` when there is one, so that the stall it measures is what the
training loop waited:

    for batch in ds.stats.watch(to_device(loader, "cuda"), every=100, jsonl="stats.jsonl", tensorboard="runs/x"):

Every `every` steps it writes one JSON line (the window since the last line: the rank's path per stage, the
stall share and the verdict, `PipelineStats.snapshot`) and, with `tensorboard` (a log folder or a
SummaryWriter), one scalar per stage under ``corgi/`` plus the stall share.  `len`, `state_dict` and
`load_state_dict` are the wrapped loader's.
"""
from __future__ import annotations

import json
import os
import time

from corgi_io.arguments import check_at_least
from corgi_io.errors import ArgumentError
from corgi_io.timing.stages import stage_index

STARTUP, STALL, WINDUP, STEP = map(stage_index, ("startup", "stall", "windup", "step"))


class WatchedLoader:
    """`loader`'s batches, each `next` timed as the data stall (the first of a pass as its start-up) and the time
    between them as the loop's step."""

    def __init__(self, stats, loader, every: int | None = None, jsonl=None, tensorboard=None):
        self.stats, self.loader = stats, loader
        self.every = check_at_least("every", every, 1, optional=True)
        if (jsonl is not None or tensorboard is not None) and self.every is None:
            raise ArgumentError("watch(jsonl=..., tensorboard=...) writes every `every` steps: give every=N")
        self.jsonl, self._writer = jsonl, _summary_writer(tensorboard)
        self.steps = 0
        self._since = None  # the board at the last line written

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)

    def __iter__(self):
        clock = self.stats.trainer_clock()
        clock.restart(STARTUP)  # until the pass's first batch: workers start (in `iter`), plan, read their first pieces
        batches = iter(self.loader)
        try:
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    clock.relabel(WINDUP)  # that wait was no batch's: the workers' end
                    return
                clock.switch(STEP)
                self.steps += 1
                if self.every and self.steps % self.every == 0:
                    self.write()
                yield batch
                clock.switch(STALL)
        finally:
            clock.close()

    def write(self) -> dict:
        """The window since the last line as a JSON line (to `jsonl`) and TensorBoard scalars; returns it."""
        self.stats.flush()  # this process's clocks: the trainer's, and the loader's when it has no workers
        board = self.stats.board()
        window = self.stats.snapshot(since=self._since)
        self._since = board
        line = {"time": time.time(), "step": self.steps, "path": window["path"], "stall_share": window["stall_share"],
                "verdict": window["verdict"]}
        if self.jsonl is not None:
            with open(os.fspath(self.jsonl), "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
        if self._writer is not None:
            for stage, seconds in window["path"].items():
                self._writer.add_scalar(f"corgi/{stage}_s", seconds, self.steps)
            if window["stall_share"] is not None:
                self._writer.add_scalar("corgi/stall_share", window["stall_share"], self.steps)
            self._writer.flush()
        return line


def _summary_writer(tensorboard):
    """A TensorBoard SummaryWriter for `tensorboard` (a log folder, or a writer as it is); None for None."""
    if tensorboard is None or hasattr(tensorboard, "add_scalar"):
        return tensorboard
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ArgumentError(f"watch(tensorboard={os.fspath(tensorboard)!r}) needs the tensorboard package: "
                            "pip install 'corgi-io[stats]'") from exc
    return SummaryWriter(os.fspath(tensorboard))

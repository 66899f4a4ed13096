"""The clock of one process's slot on the board: stage times kept in plain floats, added to the board now and then.

A process times its stages three ways:

* `switch(stage)` on the consumer thread: the time since the last switch goes to the stage that was running,
  so the consumer's stages partition its wall time with one `perf_counter` call per switch (about 0.2 µs);
  `switch` returns the stage it left, so a nested step switches back (``left = clock.switch(DECODE); ...;
  clock.switch(left)``) without a stack;
* `handed_over`: seconds the consumer spent handing items over while in ``order`` (timed by the caller around
  each yield, two `perf_counter` calls and no switch: 0.15 µs against 0.35), moved from ``order`` to
  ``handoff`` at each flush;
* `add(stage, seconds, bytes, samples)` from any thread (the reading threads: one call per piece).

A clock counts its consumer's time only once a pass `restart`s it (until then, in `UNTIMED`, dropped): a clock
that only carves out one step (`to_device`'s copy, without `watch`) counts that step and nothing around it.

The totals wait in Python lists and reach the board (a numpy (stages, FIELDS) row, in shared memory when
`PipelineStats` made it) at most every `FLUSH_SECONDS`, from the consumer thread, and at `flush()`: a board
row is only ever added to, by the one process that owns its slot, so a reader sees totals that only grow and
a new worker process of the same slot (non-persistent workers, each epoch) continues them.

With a `trace` (`TraceRing`), every interval is also kept as (stage, start, end) for a timeline
(`corgi profile --plot`); start and end are `time.perf_counter()` values, CLOCK_MONOTONIC on Linux, comparable
across the processes of one machine.
"""
from __future__ import annotations

import threading
from time import perf_counter

import numpy as np

from corgi_io.timing.stages import FIELDS, STAGES, stage_index

FLUSH_SECONDS = 0.05  # the longest a total waits in a process before a reader of the board sees it
ORDER = stage_index("order")  # where a consumer's time goes until it is switched elsewhere
HANDOFF, READ_WAIT, STORAGE = stage_index("handoff"), stage_index("read_wait"), stage_index("storage")
UNTIMED = len(STAGES)  # not a stage: where a clock's consumer time goes before its first `restart` (dropped)


class StageClock:
    """Times one process's stages into `row` (a writable numpy array (len(STAGES), len(FIELDS)); see the module)."""

    def __init__(self, row: np.ndarray, trace=None):
        self.row, self.trace = row, trace
        self._pending = np.zeros((len(STAGES), len(FIELDS)))  # read threads' additions, under the lock
        self._seconds, self._calls = [0.0] * (UNTIMED + 1), [0] * (UNTIMED + 1)  # the consumer's, unlocked
        self.handed_over = 0.0  # seconds of hand-over inside `order`, added by the consumer (see the module)
        self.items = 0          # the items those hand-overs are
        self._lock = threading.Lock()
        self.stage, self.mark = UNTIMED, perf_counter()  # nothing is counted until a pass `restart`s it
        self._flushed = self.mark

    def restart(self, stage: int = ORDER) -> None:
        """A new pass of the consumer begins, in `stage` (``order``) from now on; the time since its last pass is
        nobody's."""
        self.stage, self.mark = stage, perf_counter()

    def switch(self, stage: int) -> int:
        """From now on the consumer thread is in `stage`; returns the stage it leaves.  Consumer thread only."""
        now = perf_counter()
        left = self.stage
        self._seconds[left] += now - self.mark
        self._calls[left] += 1
        if self.trace is not None and left != UNTIMED:
            self.trace.add(left, self.mark, now)
        self.stage, self.mark = stage, now
        if now - self._flushed > FLUSH_SECONDS:
            self.flush(now)
        return left

    def relabel(self, stage: int) -> None:
        """The interval running since the last switch belongs to `stage`, whatever it was switched to (known only
        once it ends: the wait for a loader's end, say).  Consumer thread only."""
        self.stage = stage

    def waited_on_storage(self, seconds: float) -> None:
        """The consumer itself waited `seconds` on storage in the interval running now (a remote manifest's rows,
        fetched while it planned): on its path that is ``read_wait`` (out of the running stage), on the read side
        ``storage`` thread time.  Consumer thread only."""
        if seconds <= 0:
            return
        now = perf_counter()
        seconds = min(seconds, now - self.mark)  # the wait ended just now, inside the running interval
        self._seconds[self.stage] += now - self.mark - seconds
        self._seconds[READ_WAIT] += seconds
        self._calls[READ_WAIT] += 1
        if self.trace is not None:
            self.trace.add(self.stage, self.mark, now - seconds)
            self.trace.add(READ_WAIT, now - seconds, now)
        self.mark = now
        self.add(STORAGE, seconds)

    def add(self, stage: int, seconds: float, nbytes: int = 0, samples: int = 0) -> None:
        """One timed step of `stage` that ended now, on any thread: its seconds, bytes and samples."""
        with self._lock:
            self._pending[stage] += (seconds, nbytes, samples, 1)
        if self.trace is not None:
            end = perf_counter()
            self.trace.add(stage, end - seconds, end)

    def count(self, stage: int, nbytes: int = 0, samples: int = 0) -> None:
        """Bytes and samples that a switched stage handled (its time comes from `switch`)."""
        with self._lock:
            self._pending[stage, 1:3] += (nbytes, samples)

    def flush(self, now: float | None = None) -> None:
        """Add what is pending to the board row (consumer thread, or once the consumer is done)."""
        now = perf_counter() if now is None else now
        with self._lock:
            pending, self._pending = self._pending, np.zeros_like(self._pending)
        self._move_handed_over()
        pending[:, 0] += self._seconds[:UNTIMED]
        pending[:, 3] += self._calls[:UNTIMED]
        self._seconds, self._calls = [0.0] * (UNTIMED + 1), [0] * (UNTIMED + 1)
        self.row += pending
        self._flushed = now
        if self.trace is not None:
            self.trace.flush()

    def _move_handed_over(self) -> None:
        """Move `handed_over` seconds (at most what ``order`` holds) from ``order`` to ``handoff``, as `items` calls."""
        moved = min(self.handed_over, self._seconds[ORDER])
        self._seconds[ORDER] -= moved
        self._seconds[HANDOFF] += moved
        self._calls[HANDOFF] += self.items
        self.handed_over, self.items = 0.0, 0

    def close(self) -> None:
        """The consumer is done: the running stage's time so far is counted, everything reaches the board."""
        self.switch(self.stage)
        self.flush()


class NullClock:
    """A clock that counts nothing (`Reading(timing="off")`): the same calls, no cost beyond the call."""

    stage, handed_over, items = ORDER, 0.0, 0

    def restart(self, stage: int = ORDER) -> None:
        pass

    def relabel(self, stage: int) -> None:
        pass

    def waited_on_storage(self, seconds: float) -> None:
        pass

    def switch(self, stage: int) -> int:
        return stage

    def add(self, stage: int, seconds: float, nbytes: int = 0, samples: int = 0) -> None:
        pass

    def count(self, stage: int, nbytes: int = 0, samples: int = 0) -> None:
        pass

    def flush(self, now: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass


NULL_CLOCK = NullClock()  # what a reader times with when nobody asked


class TraceRing:
    """The latest `capacity` intervals (stage, start, end) of one slot, in `events` (a writable numpy array
    (capacity, 3), in shared memory) and `written` (a one-element int64 array: intervals written so far, so the
    newest is at ``(written - 1) % capacity``).  Intervals are buffered per process and written at `flush`."""

    def __init__(self, events: np.ndarray, written: np.ndarray):
        self.events, self.written = events, written
        self._buffer, self._lock = [], threading.Lock()

    def add(self, stage: int, start: float, end: float) -> None:
        """One interval of `stage`, kept in this process until the next `flush` (any thread)."""
        with self._lock:
            self._buffer.append((stage, start, end))

    def flush(self) -> None:
        """Write the kept intervals into the ring, the newest over the oldest (the consumer's thread)."""
        with self._lock:
            buffer, self._buffer = self._buffer, []
        capacity = len(self.events)
        at = int(self.written[0]) + max(0, len(buffer) - capacity)  # what did not fit is counted, not kept
        for stage, start, end in buffer[-capacity:]:
            self.events[at % capacity] = (stage, start, end)
            at += 1
        self.written[0] = at

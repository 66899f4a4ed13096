"""How many reads run at once: fixed, or grown one at a time while it pays (docs/operations.md).

Over a network, reads in flight hide latency, and the right number depends on the link: an
object store 20 ms away wants 8 or more, nginx on loopback is CPU-bound and does best with 1
or 2 (more only add thread and GIL contention).  `InFlight` starts at `start` and, after every
`window` reads at the current limit, compares the throughput reads achieve (limit x median
bytes per second of one read, which a slow consumer does not disturb) with the throughput
before the last step.  If the read added brought at least `gain` (half) of what one read
alone brings on average, the limit grows by one, up to `most`; otherwise it goes back to
the count before that step and settles for good.  Only timing adapts: what is read, and the order samples come out in, never does.
"""
from __future__ import annotations

import statistics
import threading
import time


class InFlight:
    """A gate that lets at most `limit` reads run at once; `limit` grows from `start` towards `most`."""

    def __init__(self, start: int, most: int, window: int = 8, gain: float = 0.5):
        self.limit, self.most = max(1, min(start, most)), max(1, most)
        self.window, self.gain = window, gain
        self.settled = self.limit >= self.most
        self._before, self._rates, self._running = 0.0, [], 0
        self._gate = threading.Condition()

    def run(self, read, *args) -> bytes:
        """`read(*args)` once fewer than `limit` reads are running; its bytes/s feed the adaptation."""
        with self._gate:
            self._gate.wait_for(lambda: self._running < self.limit)
            self._running += 1
        start = time.perf_counter()
        try:
            data = read(*args)
        finally:
            with self._gate:
                self._running -= 1
                self._gate.notify()
        if not self.settled:
            self.observe(len(data), time.perf_counter() - start)
        return data

    def observe(self, nbytes: int, seconds: float) -> None:
        """One finished read of `nbytes` that took `seconds`; every `window` of them may move `limit`."""
        rate = nbytes / max(seconds, 1e-9)
        with self._gate:
            if self.settled:
                return
            self._rates.append(rate)
            if len(self._rates) < self.window:
                return
            throughput = self.limit * statistics.median(self._rates)
            self._rates = []
            if self._before and throughput < self._before * (1 + self.gain / (self.limit - 1)):
                self.settled = True
                self.limit -= 1  # the last step did not pay: back to the count before it
                return
            self._before = throughput
            self.limit += 1
            self.settled = self.limit >= self.most
            self._gate.notify_all()

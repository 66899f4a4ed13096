"""How many reads run at once: the link's bandwidth-delay product, measured as reads complete (docs/operations.md).

Over a network, reads in flight hide latency: to keep a link of bandwidth B busy when every read
waits L before its first byte, about B x L bytes must be in flight, beyond the read being
received.  `InFlight` measures both as reads complete.  A read of n bytes that shared the link with
c - 1 others took about  t = L + n x c / B;  exponentially weighted moments of (n x c, t) over the
reads fit that line, whose intercept is the time to first byte L and whose slope is 1 / B.  The
limit is then 1 + ceil(min(B x L, MAX_IN_FLIGHT_BYTES) / the mean read's bytes), between `start`
(the storage's count that already pays with no latency) and `most` (the reader's threads, never
more than its `Reading(prefetch_blocks)` pieces).  Until the reads differ enough to fit a line
(their sizes or their sharing), every finished read allows one more (a probe, which makes them
differ); once fitted, reads too alike to refit leave the limit where it is.  A link whose reads keep their speed however many share it (slope 0) gets `most`; a CPU-bound
one (loopback: L about 0) stays at `start`.  Only timing adapts: what is read, and the order samples
come out in, never does.
"""
from __future__ import annotations

import math
import threading
import time

MAX_IN_FLIGHT_BYTES = 256 << 20  # the most bytes a reader keeps in flight for latency, whatever B x L says
SMOOTHING = 0.2                  # weight of the newest read in the moving moments


class LinkFit:
    """Exponentially weighted moments of (x, y) and the line y = intercept + slope x they fit."""

    def __init__(self, smoothing: float = SMOOTHING):
        self.smoothing, self.count = smoothing, 0
        self.x = self.y = self.xx = self.xy = 0.0

    def add(self, x: float, y: float) -> None:
        a = 1.0 if self.count == 0 else self.smoothing
        self.x, self.y = self.x + a * (x - self.x), self.y + a * (y - self.y)
        self.xx, self.xy = self.xx + a * (x * x - self.xx), self.xy + a * (x * y - self.xy)
        self.count += 1

    def line(self) -> tuple | None:
        """(intercept, slope), or None while the x seen so far are too alike (spread under 5% of their mean)."""
        spread = self.xx - self.x * self.x
        if self.count < 3 or spread <= (0.05 * self.x) ** 2:
            return None
        slope = (self.xy - self.x * self.y) / spread
        return self.y - slope * self.x, slope


class InFlight:
    """A gate that lets at most `limit` reads run at once; `limit` follows the measured bandwidth-delay product,
    between `start` and `most` (equal: a fixed count, `settled`)."""

    def __init__(self, start: int, most: int, smoothing: float = SMOOTHING):
        self.most = max(1, most)
        self.start = self.limit = max(1, min(start, self.most))
        self.settled = self.limit >= self.most
        self.fit, self.read_bytes = LinkFit(smoothing), None
        self.latency = self.bandwidth = None  # seconds to first byte, bytes/s of the link: the latest fit
        self._running = 0
        self._gate = threading.Condition()

    def run(self, read, *args) -> bytes:
        """`read(*args)` once fewer than `limit` reads are running; its bytes, time and sharing feed the fit."""
        with self._gate:
            self._gate.wait_for(lambda: self._running < self.limit)
            self._running += 1
            sharing = self._running
        start = time.perf_counter()
        try:
            data = read(*args)
        finally:
            with self._gate:
                self._running -= 1
                self._gate.notify()
        if not self.settled:
            self.observe(nbytes_of(data), time.perf_counter() - start, sharing)
        return data

    def observe(self, nbytes: int, seconds: float, sharing: int = 1) -> None:
        """One finished read of `nbytes` that took `seconds` while `sharing` reads (itself included) ran."""
        with self._gate:
            self.fit.add(nbytes * sharing, seconds)
            self.read_bytes = nbytes if self.read_bytes is None else \
                self.read_bytes + self.fit.smoothing * (nbytes - self.read_bytes)
            self.limit = self._sized()
            self._gate.notify_all()

    def _sized(self) -> int:
        """The limit the latest fit asks for; one more than now until a first fit, unchanged while the fit is lost."""
        line = self.fit.line()
        if line is None:
            return self.limit if self.latency is not None else min(self.most, self.limit + 1)
        latency, slope = line
        self.latency = max(0.0, latency)
        self.bandwidth = math.inf if slope <= 0 else 1.0 / slope
        in_flight = min(self.bandwidth * self.latency, MAX_IN_FLIGHT_BYTES) if self.latency else 0.0
        wanted = 1 + math.ceil(in_flight / max(1.0, self.read_bytes))
        return max(self.start, min(self.most, wanted))


def nbytes_of(data) -> int:
    """The bytes of a read's answer: one buffer, or a list of them (`Storage.read_ranges`)."""
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else sum(map(len, data))

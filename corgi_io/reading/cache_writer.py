"""The cache's writer: pieces written to the cache folder on one background thread, off the read path.

A reading thread that has fetched and checked a piece hands it over with `offer` and goes on at once:
the piece's samples are already in its hands, so what happens to the copy offered (written, dropped) never
changes what is yielded.  The pieces waiting hold at most `capacity` bytes (one piece, whatever its size,
when none waits) and are at most `most_items` (each holds its piece's lock, a file descriptor, until written); a piece that does not fit is refused (it is not cached, and the reader never waits for
the disk) unless the caller asks to wait (a prefetch thread, which is not on the read path).  The thread
runs at the lowest CPU priority, so that on a busy machine it takes the time the reads leave, and the
queue fills and refuses rather than slow the reads.  The thread starts with the first piece and ends once no piece
has come for `linger` seconds; it is not a daemon, so a process that ends (a DataLoader worker at the end
of its epoch included) first writes what waits, and never leaves a piece half written.
"""
from __future__ import annotations

import collections
import contextlib
import os
import threading

WRITE_QUEUE = 64 << 20  # bytes of the pieces waiting to be written, at most: memory beyond the reader's own bound
WRITE_ITEMS = 64  # pieces waiting, at most: each holds its piece lock (a file descriptor) until it is written
LINGER = 0.5  # seconds the idle thread waits for another piece before it ends
_IDLE = object()  # what `_next` gives when the thread should end


class CacheWriter:
    """Runs `write(item)` for each offered item, in order, on one background thread; `write` must not raise."""

    def __init__(self, write, capacity: int = WRITE_QUEUE, linger: float = LINGER, most_items: int = WRITE_ITEMS):
        self._write, self.capacity, self.linger, self.most_items = write, capacity, linger, most_items
        self._waiting = collections.deque()  # (item, its bytes)
        self._queued = 0  # bytes waiting
        self._changed = threading.Condition()
        self._thread = None
        self._busy = False  # an item taken off the queue is being written
        self.dropped = 0  # items refused because the queue was full

    def offer(self, item, nbytes: int, wait: bool = False) -> bool:
        """Queue `item` (`nbytes` to write) for writing; False (and nothing queued) when it does not fit and not
        `wait`."""
        with self._changed:
            while self._waiting and (self._queued + nbytes > self.capacity or len(self._waiting) >= self.most_items):
                if not wait:
                    self.dropped += 1
                    return False
                self._changed.wait()
            self._waiting.append((item, nbytes))
            self._queued += nbytes
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="corgi-cache-writer", daemon=False)
                self._thread.start()
            self._changed.notify_all()
        return True

    def flush(self) -> None:
        """Return once every item offered so far has been written."""
        with self._changed:
            while self._busy or (self._waiting and self._thread is not None):
                self._changed.wait()

    def _run(self) -> None:
        """Write the queued items in order, until none has come for `linger` seconds (or `write` raised: what
        waits is left to the thread the next offer starts)."""
        lowest_priority()
        try:
            for item in iter(self._next, _IDLE):
                self._write(item)
        finally:
            with self._changed:
                self._busy = False
                if self._thread is threading.current_thread():
                    self._thread = None
                self._changed.notify_all()

    def _next(self):
        """The next item to write (the previous one is written), or `_IDLE` when none came for `linger` seconds."""
        with self._changed:
            self._busy = False
            self._changed.notify_all()  # room for an offer that waits; a flush may be done
            if not self._waiting:
                self._changed.wait(self.linger)
            if not self._waiting:
                self._thread = None
                return _IDLE
            (item, nbytes), self._busy = self._waiting.popleft(), True
            self._queued -= nbytes
            return item


def lowest_priority() -> None:
    """Give the calling thread the lowest CPU priority (nice 19; Linux's nice value is per thread), so that its
    writes take the CPU time the reading threads and the training leave; elsewhere, leave it as it is."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)

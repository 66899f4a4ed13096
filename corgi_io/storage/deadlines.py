"""Deadlines for blocking socket reads: one watchdog thread per process shuts down the socket of a
request that ran past its deadline, so that a read blocked on a stalled or trickling peer returns.

A socket timeout bounds each `recv`, not a body: a peer that sends one byte per second never trips
it. Checking the clock between small reads would bound it too, but costs a Python call per chunk
(about half as much CPU again for a 4 MB block over loopback); the watchdog costs nothing until a
deadline passes. A request un-watches its socket before the connection goes back to the pool, so
the watchdog never touches a socket that another request uses.
"""
from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time


class Watchdog:
    """Shuts down each watched socket at its deadline unless it was cancelled first."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        """Empty, with no thread: the state after fork (the parent's thread does not come along)."""
        self._cond, self._heap, self._socks, self._tokens = threading.Condition(), [], {}, itertools.count()
        self._running = False

    def watch(self, sock: socket.socket, deadline_at: float) -> int:
        """Shut `sock` down at `deadline_at` (time.monotonic()) unless `cancel(token)` comes first."""
        with self._cond:
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, args=(self._cond,), name="corgi-deadlines", daemon=True).start()
            token = next(self._tokens)
            self._socks[token] = sock
            heapq.heappush(self._heap, (deadline_at, token))
            if len(self._heap) > 2 * len(self._socks) + 64:  # drop the cancelled entries
                self._heap = [entry for entry in self._heap if entry[1] in self._socks]
                heapq.heapify(self._heap)
            self._cond.notify()
            return token

    def cancel(self, token: int) -> bool:
        """Stop watching; False when the deadline came first (the socket was shut down)."""
        with self._cond:
            return self._socks.pop(token, None) is not None

    def _run(self, cond: threading.Condition) -> None:
        with cond:
            while cond is self._cond:  # a fork made a new one: this thread belongs to the parent's
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    sock = self._socks.pop(heapq.heappop(self._heap)[1], None)
                    if sock is not None:
                        _shut_down(sock)
                cond.wait(self._heap[0][0] - now if self._heap else None)


def _shut_down(sock: socket.socket) -> None:
    """End both directions: a `recv` blocked in another thread returns at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG._reset)

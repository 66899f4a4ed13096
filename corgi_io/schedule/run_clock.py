"""The clock of one rank's epoch: its workers' reads over one shared link, overlapped with their decoding.

Each worker runs its pass as `reading/read_ahead.py` and `reading/piece_reader.py` do:

* pieces are submitted in read order whenever the consumer asks for the next one, at most `ahead` of them not
  yet taken by it (`Reading(prefetch_blocks)`), and read on `threads` threads (the reads in flight);
* a read waits `latency` before its first byte, then moves its bytes over the rank's link, which every
  transfer under way shares equally (processor sharing: n transfers move bandwidth / n each); a piece the
  cache holds is read at once;
* the consumer takes the pieces in order and, once a buffer's last piece is in, spends the buffer's CPU time
  (decode) before it asks for the next piece: reads submitted before carry on meanwhile, no new one starts;
* with a cache, once the read-ahead has submitted the worker's last piece and has room for another, one more
  thread fetches the next epoch's first pieces (`warm`), one at a time, over the same link
  (`loaders/piece_cache.py:cached_epoch`): they end no epoch, but they take their share of the link.

The rank's epoch ends when its slowest worker does (a DataLoader takes its workers' batches in turn).
Event-driven: O(P log P) in the rank's pieces P.  Pure: numbers in, numbers out.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

FIRST_BYTE, CACHED, DECODED = 0, 1, 2  # the kinds of timed events


@dataclass(frozen=True)
class WorkerPass:
    """One worker's epoch as the clock needs it: per piece (read order) its bytes and whether it crosses the link
    (False: the cache holds it); per buffer, the index one past its last piece and its CPU seconds; the bytes of
    each piece of the next epoch fetched ahead into the cache, in order."""

    nbytes: np.ndarray
    remote: np.ndarray
    ends: np.ndarray
    cpu: np.ndarray
    warm: tuple = ()


@dataclass
class _Worker:
    """A worker's progress: pieces submitted, taken by the consumer and read; reads running and waiting; its buffer."""

    work: WorkerPass
    submitted: int = 0
    taken: int = 0
    buffer: int = 0
    running: int = 0
    warming: bool = False
    busy: bool = False
    finish: float | None = None
    waiting: deque = field(default_factory=deque)
    done: set = field(default_factory=set)


class Link:
    """Transfers sharing `bandwidth` bytes/s equally, kept in *moved* bytes (what each transfer under way has moved
    since the start): one that starts at `moved` = M with n bytes ends when `moved` reaches M + n."""

    def __init__(self, bandwidth: float):
        self.rate, self.moved, self.at, self.heap, self.count = bandwidth, 0.0, 0.0, [], 0

    def _advance(self, now: float) -> None:
        if self.heap:
            self.moved += (now - self.at) * self.rate / len(self.heap)
        self.at = now

    def add(self, now: float, nbytes: float, item) -> None:
        """A transfer of `nbytes` starts at `now`."""
        self._advance(now)
        heapq.heappush(self.heap, (self.moved + nbytes, self.count, item))
        self.count += 1

    def next_end(self) -> float:
        """When the next transfer ends if nothing starts before (inf: none under way)."""
        if not self.heap:
            return math.inf
        return self.at + (self.heap[0][0] - self.moved) * len(self.heap) / self.rate

    def pop(self, now: float):
        """The transfer that ends at `now` (`next_end`)."""
        self._advance(now)
        return heapq.heappop(self.heap)[2]


class RankClock:
    """One rank's workers (`WorkerPass` each) over one link: `run()` gives each worker's finishing time (s).

    `latency` s before each read's first byte, `bandwidth` bytes/s shared by the rank (inf: no limit), `threads`
    reads in flight and `ahead` pieces read ahead per worker, `slow`: the factor on every CPU time (workers
    sharing fewer cores than they are), `start`: when the workers begin."""

    def __init__(self, passes, *, latency: float, bandwidth: float, threads: int, ahead: int, slow: float = 1.0,
                 start: float = 0.0):
        self.workers = [_Worker(p) for p in passes]
        self.latency, self.threads, self.ahead, self.slow = latency, max(1, threads), max(1, ahead), slow
        self.link = None if math.isinf(bandwidth) else Link(bandwidth)
        self.now, self.events, self.count = start, [], 0

    def run(self) -> list:
        for w in range(len(self.workers)):
            self._pull(w)
        while True:
            link_end = self.link.next_end() if self.link else math.inf
            event_at = self.events[0][0] if self.events else math.inf
            if math.isinf(link_end) and math.isinf(event_at):
                return [worker.finish for worker in self.workers]
            if link_end <= event_at:
                self.now = link_end
                self._read_done(*self.link.pop(self.now))
            else:
                self.now, _, kind, w, piece = heapq.heappop(self.events)
                self._event(kind, w, piece)

    def _at(self, when: float, kind: int, w: int, piece: int = -1) -> None:
        heapq.heappush(self.events, (when, self.count, kind, w, piece))
        self.count += 1

    def _event(self, kind: int, w: int, piece: int) -> None:
        if kind == DECODED:
            worker = self.workers[w]
            worker.busy, worker.buffer = False, worker.buffer + 1
            self._pull(w)
        elif kind == FIRST_BYTE and self.link is not None:
            work = self.workers[w].work
            nbytes = work.nbytes[piece] if piece < len(work.nbytes) else work.warm[piece - len(work.nbytes)]
            self.link.add(self.now, float(nbytes), (w, piece))
        else:  # CACHED, or the first byte of a read over a link without a limit: all of it is there
            self._read_done(w, piece)

    def _pull(self, w: int) -> None:
        """The consumer of worker `w` goes on: it takes the pieces that are in, and decodes a buffer once whole."""
        worker = self.workers[w]
        ends = worker.work.ends
        while not worker.busy and worker.buffer < len(ends):
            self._fill(w)
            if worker.taken == ends[worker.buffer]:
                worker.busy = True
                self._at(self.now + float(worker.work.cpu[worker.buffer]) * self.slow, DECODED, w)
                return
            if worker.taken not in worker.done:
                return  # waits for that read
            worker.done.discard(worker.taken)
            worker.taken += 1
        if worker.buffer == len(ends) and worker.finish is None:
            worker.finish = self.now

    def _fill(self, w: int) -> None:
        """Submit the next pieces while fewer than `ahead` are submitted and not taken (`read_ahead`); past the last
        one, start the fetches ahead of the next epoch."""
        worker = self.workers[w]
        n = len(worker.work.nbytes)
        while worker.submitted - worker.taken < self.ahead and worker.submitted < n:
            if worker.running < self.threads:
                self._start(w, worker.submitted)
            else:
                worker.waiting.append(worker.submitted)
            worker.submitted += 1
        if worker.submitted == n and worker.submitted - worker.taken < self.ahead and not worker.warming:
            worker.warming = True
            if len(worker.work.warm):
                self._at(self.now + self.latency, FIRST_BYTE, w, n)

    def _start(self, w: int, piece: int) -> None:
        worker = self.workers[w]
        worker.running += 1
        if worker.work.remote[piece]:
            self._at(self.now + self.latency, FIRST_BYTE, w, piece)
        else:
            self._at(self.now, CACHED, w, piece)

    def _read_done(self, w: int, piece: int) -> None:
        worker = self.workers[w]
        n = len(worker.work.nbytes)
        if piece >= n:  # a fetch ahead: the next one starts
            if piece + 1 - n < len(worker.work.warm):
                self._at(self.now + self.latency, FIRST_BYTE, w, piece + 1)
            return
        worker.running -= 1
        worker.done.add(piece)
        if worker.waiting:
            self._start(w, worker.waiting.popleft())
        if worker.taken == piece:
            self._pull(w)

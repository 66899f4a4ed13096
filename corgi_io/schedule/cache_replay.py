"""The loader's cache of remote pieces, replayed over the reads a rank's plan makes: hits, fetches, bytes.

As `reading/piece_cache.py` and `loaders/piece_cache.py` run it, for one folder of `limit` bytes shared by a
rank's workers: each worker has its own `CacheBook` (`eviction.py`) whose known future is its own pieces of
this epoch, then of the next; a read that finds its piece in the folder is a hit; any other fetches the piece
and offers it to the policy (`decide`), which may evict pieces for it or refuse it; once a worker's read-ahead
has taken its last buffer, the first `prefetch` pieces of its next epoch are fetched ahead, one at a time,
where the policy would keep them (`PieceCache.warm`), in the epoch that ends.  Pieces are named as the loader
names them (`"start-stop"`), so a block cut differently in two epochs is two pieces.

What the replay leaves out: time.  Reads and prefetches come in the order of their progress, every stream of
reads at the same pace (`_events`); pieces are written at once (the loader's writer can drop one when its queue
is full); a folder is one rank's (a node's ranks can share one).

Cost: `decide` ranks every cached piece by urgency; here each book keeps a heap of the cached pieces by its
own urgency (stale entries skipped), and `decide` is given only the least urgent ones whose bytes cover the
room needed, which is all it can look at: the same decisions in O(log C) per read instead of O(C log C).
O(R K log R) for R reads by K workers.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from corgi_io.schedule.eviction import CacheBook, decide, piece_key

READ, WARM = 0, 1  # a read of the epoch; a prefetch of the next epoch's


def piece_keys(pieces) -> list:
    """The loader's names of cached pieces (rows block, start, stop): `eviction.piece_key` of each."""
    return [piece_key(piece) for piece in np.asarray(pieces, np.int64).reshape(-1, 3).tolist()]


@dataclass
class Folder:
    """The pieces held ({key: bytes}) and their total."""

    held: dict = field(default_factory=dict)
    used: int = 0

    def add(self, key: str, nbytes: int) -> None:
        self.held[key] = nbytes
        self.used += nbytes

    def remove(self, key: str) -> None:
        self.used -= self.held.pop(key)


class HeapBook:
    """A worker's `CacheBook` with a heap of the folder's pieces by its urgency, least urgent on top; an entry is
    stale once its piece left the folder or its urgency changed (then a newer entry holds it)."""

    def __init__(self, policy: str, limit: int, future: list, order: dict):
        self.book, self.order, self.heap = CacheBook(policy, limit), order, []
        self.book.plan(future)

    def urgency(self, key: str) -> float:
        return self.book.mode.urgency(self.book, key)

    def push(self, key: str) -> None:
        """(Re)rank `key`, a piece of the folder."""
        heapq.heappush(self.heap, (-self.urgency(key), -self.order[key], key))

    def access(self, key: str, folder: Folder, advance: bool = True) -> None:
        """`CacheBook.access`, and the piece's new rank when the folder holds it."""
        self.book.access(key, advance)
        if key in folder.held:
            self.push(key)

    def decide(self, key: str, nbytes: int, folder: Folder):
        """`CacheBook.decide(key, nbytes, folder.held)`, given only the pieces it can evict (see the module)."""
        limit = self.book.limit
        free = limit - folder.used
        if nbytes > limit or free >= nbytes:
            return decide(key, nbytes, {}, limit if nbytes > limit else free, self.urgency)
        least = self._least_urgent(folder, nbytes - free)
        decision = decide(key, nbytes, least, free + sum(least.values()), self.urgency)
        for other in least:  # back in the heap: a decision is not always carried out (a prefetch's first look)
            self.push(other)
        return decision

    def _least_urgent(self, folder: Folder, room: int) -> dict:
        """The least urgent pieces of the folder, in order, until their bytes reach `room` (or none is left)."""
        out, got = {}, 0
        while self.heap and got < room:
            rank, _, key = heapq.heappop(self.heap)
            if key in folder.held and key not in out and -rank == self.urgency(key):
                out[key] = folder.held[key]
                got += out[key]
        return out


class CacheReplay:
    """One rank's folder over its epochs: `epoch(reads, upcoming)` replays one epoch's reads ([worker] -> keys in
    read order) knowing the next's (`upcoming`, the same shape), and gives its hits, fetches and bytes."""

    def __init__(self, limit: int, sizes: dict, policy: str = "belady", prefetch: int = 0, streams: int = 1):
        self.limit, self.sizes, self.policy, self.prefetch, self.streams = limit, sizes, policy, prefetch, streams
        self.order = {key: i for i, key in enumerate(sorted(sizes))}  # `decide`'s tie-break: the name
        self.folder = Folder()
        self._books: list = []  # this epoch's, one per worker: each ranks every piece the folder holds

    def epoch(self, reads: list, upcoming: list) -> dict:
        """{"remote": [per worker a bool per read: fetched], "warm": [per worker the bytes of each piece it fetched
        ahead for the next epoch], "hits", "reads", "remote_bytes"} of one epoch (the fetches ahead counted in it)."""
        self._books = books = [self._book(mine + theirs) for mine, theirs in zip(reads, upcoming)]
        remote = [np.zeros(len(keys), bool) for keys in reads]
        warm = [[] for _ in reads]
        fetched = 0
        for kind, w, i in self._events(reads, upcoming):
            if kind == WARM:
                warm[w] += [self._warm(books[w], upcoming[w][i])]
                continue
            key = reads[w][i]
            remote[w][i] = key not in self.folder.held
            books[w].access(key, self.folder)
            if remote[w][i]:
                fetched += self.sizes[key]
                self._keep(books[w], key)
        warm = [tuple(nbytes for nbytes in mine if nbytes) for mine in warm]
        hits = sum(int((~flags).sum()) for flags in remote)
        return {"remote": remote, "warm": warm, "hits": hits, "reads": sum(map(len, reads)),
                "remote_bytes": fetched + sum(map(sum, warm))}

    def _events(self, reads: list, upcoming: list) -> list:
        """(READ or WARM, worker, index) of every read and prefetch of the epoch, in the order of their progress:
        every stream of reads moves at the same rate, so a worker's i-th of n reads comes at (i + 1/2) / n; its
        prefetch starts once `prefetch` of its reads are left (when its read-ahead takes its last buffer) and
        fetches one piece at a time, at 1 / `streams` of the pace of the worker's reads."""
        rows = []
        for w, keys in enumerate(reads):
            n = max(1, len(keys))
            rows += [((i + 0.5) / n, READ, w, i) for i in range(len(keys))]
            start = max(0, len(keys) - self.prefetch)
            rows += [((start + (j + 1) * self.streams) / n, WARM, w, j)
                     for j in range(min(self.prefetch, len(upcoming[w])))]
        rows.sort()
        return [row[1:] for row in rows]

    def _book(self, future: list) -> HeapBook:
        book = HeapBook(self.policy, self.limit, future, self.order)
        for key in self.folder.held:
            book.push(key)
        return book

    def _keep(self, book: HeapBook, key: str) -> None:
        """A fetched piece offered to the folder: evict what the policy says, keep it if admitted
        (`PieceCache._keep`)."""
        decision = book.decide(key, self.sizes[key], self.folder)
        for victim in decision.evict:
            self.folder.remove(victim)
        if decision.admit:
            self.folder.add(key, self.sizes[key])
            for other in self._books:
                other.push(key)

    def _warm(self, book: HeapBook, key: str) -> int:
        """Bytes fetched ahead for `key` of the next epoch (`PieceCache.warm`): none if held or not worth keeping."""
        if key in self.folder.held:
            return 0
        book.access(key, self.folder, advance=False)
        if not book.decide(key, self.sizes[key], self.folder).admit:
            return 0
        book.access(key, self.folder, advance=False)
        self._keep(book, key)
        return self.sizes[key]

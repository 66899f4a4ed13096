"""Which cached piece goes when a new one arrives: Belady's rule over the known future, or LRU.

A loader knows its future: the rest of this epoch's read order and the whole next epoch's are
pure functions of the seed and the epoch (`EpochPlanner`).  So a cache of remote pieces can use
Belady's optimal policy instead of guessing from the past: when room is needed, the piece whose
next use lies furthest ahead goes first, and a piece that would be wanted later than every piece
it displaces is not admitted at all (it is read and passed on, not kept).  With pieces of equal
size this is the optimum (fewest fetches); with unequal sizes it is the classic greedy, and it
keeps the invariant that no piece evicted is used sooner than a piece kept.

Policies differ only in their *urgency*: a number per piece, lower for a piece wanted sooner
(Belady: its next position in the future order; LRU: minus its last access).  `decide` is the one
admission rule; `EVICTIONS` is the registry (`Cache(folder, limit, policy=...)`).  Pure: keys
are any hashable piece names, sizes are bytes, nothing here touches a file.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from corgi_io.arguments import check_at_least, choose

NEVER = float("inf")  # the urgency of a piece that the known future does not read again


def piece_key(piece) -> str:
    """The cache's name for a piece (block, start, stop): its sample rows, which fix its bytes in the pack (the
    loader's `PieceCache` and `corgi plan --simulate`'s replay name pieces alike)."""
    _, start, stop = piece
    return f"{int(start)}-{int(stop)}"


class FutureUses:
    """The positions at which each piece is read in a known future order (a list of piece keys), and how many
    of each piece's reads have happened: reads that finish out of order (several in flight) still consume
    each piece's own next position, so no position is skipped."""

    def __init__(self, sequence: Sequence[Hashable]):
        self.positions: dict = {}
        for position, key in enumerate(sequence):
            self.positions.setdefault(key, []).append(position)
        self.done: dict = {}  # key -> how many of its positions have been read

    def next_use(self, key: Hashable) -> float:
        """The position of the next read of `key`, or NEVER."""
        uses, done = self.positions.get(key, ()), self.done.get(key, 0)
        return uses[done] if done < len(uses) else NEVER

    def consume(self, key: Hashable) -> None:
        """`key` was read at its next position."""
        if self.next_use(key) != NEVER:
            self.done[key] = self.done.get(key, 0) + 1


@dataclass(frozen=True)
class Decision:
    """Whether to keep the new piece, and which cached pieces to delete first to make room for it."""

    admit: bool
    evict: tuple = ()


def decide(key: Hashable, size: int, cached: Mapping, limit: int, urgency: Callable[[Hashable], float]) -> Decision:
    """Admit `key` (`size` bytes) to a cache holding `cached` ({key: bytes}) under `limit` bytes?

    Victims are taken from the least urgent cached piece on, only while room is short; if a victim
    would be at least as urgent as the new piece, nothing is evicted and the new piece is refused
    (keeping it would cost a sooner fetch than it saves).  A piece above the whole limit is refused.
    """
    if size > limit:
        return Decision(False)
    free, victims, mine = limit - sum(cached.values()), [], urgency(key)
    for other in sorted(cached, key=lambda k: (urgency(k), str(k)), reverse=True):
        if free >= size:
            break
        if urgency(other) <= mine:
            return Decision(False)
        victims.append(other)
        free += cached[other]
    return Decision(free >= size, tuple(victims))


@dataclass(frozen=True)
class EvictionMode:
    """One eviction policy: the urgency of a piece for a `CacheBook` (lower: wanted sooner, kept longer)."""

    urgency: Callable[[CacheBook, Hashable], float]


EVICTIONS = {
    "belady": EvictionMode(lambda book, key: book.future.next_use(key)),
    "lru": EvictionMode(lambda book, key: -book.last_use.get(key, -NEVER)),
}


class CacheBook:
    """One reader's bookkeeping for a cache: its known future order and how far it has read it, and its past
    accesses; `access` records a read, `decide` gives the policy's `Decision` for keeping its piece."""

    def __init__(self, policy: str, limit: int):
        self.mode: EvictionMode = choose("cache_policy", policy, EVICTIONS)
        self.limit = check_at_least("cache_limit", limit, 1, optional=False)
        self.future = FutureUses(())
        self.last_use: dict = {}  # key -> tick of its latest access
        self.tick = 0

    def plan(self, sequence: Sequence[Hashable]) -> None:
        """Start a new known future: `sequence` is read from now on (an epoch's rest and the next epoch)."""
        self.future = FutureUses(sequence)

    def access(self, key: Hashable, advance: bool = True) -> None:
        """Record a read of `key`: the newest access; with `advance`, also its next read in the future order
        (a prefetch for later records the access and consumes nothing)."""
        self.last_use[key], self.tick = self.tick, self.tick + 1
        if advance:
            self.future.consume(key)

    def decide(self, key: Hashable, size: int, cached: Mapping) -> Decision:
        """Keep `key` (just accessed) in a cache holding `cached`? (`decide` with this policy's urgency)."""
        return decide(key, size, cached, self.limit, lambda k: self.mode.urgency(self, k))

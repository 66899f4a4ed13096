"""Size-balanced batch composition inside a worker's shuffle buffers, heavy samples aligned across ranks."""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np


def balanced_batches(ids: np.ndarray, sizes: np.ndarray, batch_size: int, target: float,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Order ``ids`` so that each consecutive group of ``batch_size`` has a size
    sum close to the others and to ``target``; return ``(batched, carry)``.

    ``carry`` holds the ``len(ids) % batch_size`` samples left over, chosen (a
    run of neighbours in size order) so that the batches' mean comes closest to
    ``target``; the caller puts them into the next buffer. The rest are placed
    largest first, each on a batch that still has room and whose sum is within
    the sample's own size of the lightest such batch (LPT with a count limit,
    randomised): the seed decides who meets whom, while the final sums stay
    within about two small samples of each other, except where one sample
    alone outweighs a balanced batch.
    """
    ids = np.asarray(ids, dtype=np.int64)
    m, spare = divmod(len(ids), batch_size)
    if m == 0:
        return ids[:0], ids
    perm = rng.permutation(len(ids))  # random tie-break between equal sizes
    by_size = perm[np.argsort(-sizes[perm], kind="stable")]
    s = sizes[by_size].astype(np.float64)
    if spare:
        ring = np.concatenate(([0.0], np.cumsum(s)))
        window = ring[spare:] - ring[:-spare]  # sum of by_size[j : j + spare]
        j = int(np.argmin(np.abs(window - (ring[-1] - m * target))))
        carry = by_size[j:j + spare]
        by_size = np.concatenate((by_size[:j], by_size[j + spare:]))
    else:
        carry = by_size[:0]
    slots = _place_largest_first(by_size, sizes, m, batch_size, rng)
    slots = rng.permuted(slots[rng.permutation(m)], axis=1)
    return ids[slots.ravel()], ids[carry]


def _place_largest_first(by_size: np.ndarray, sizes: np.ndarray, m: int, batch_size: int,
                         rng: np.random.Generator) -> np.ndarray:
    """The (m, batch_size) positions of `by_size` (largest first): each goes, uniformly at random, to a
    batch with room that is strictly lighter than the lightest such batch plus its own size (or is the
    lightest: so two equal samples never share a batch while an emptier one has room).

    The batches with room are kept sorted by sum, so the candidates are a prefix found by bisection:
    O(n log m) comparisons plus O(n m) bytes moved in C, against O(n m) numpy work before (9 us per
    sample at m = 50)."""
    slots = [[] for _ in range(m)]
    open_sums, open_batches = [0.0] * m, list(range(m))  # batches with room, by (sum, when it got there)
    draws = rng.random(len(by_size)).tolist()
    for idx, x, u in zip(by_size.tolist(), sizes[by_size].tolist(), draws):
        lightest = open_sums[0]  # the lighter than lightest + x, or (x = 0) the lightest: never fewer than those
        j = int(u * (bisect_left(open_sums, lightest + x) or bisect_right(open_sums, lightest)))
        b, total = open_batches.pop(j), open_sums.pop(j) + x
        slots[b].append(idx)
        if len(slots[b]) < batch_size:
            k = bisect_right(open_sums, total)
            open_sums.insert(k, total)
            open_batches.insert(k, b)
    return np.array(slots, dtype=np.int64).reshape(m, batch_size)


HEAVY_EVERY = 32  # a worker's heavy slots are its batches j with j % HEAVY_EVERY == HEAVY_EVERY - 1


def heavy_slot(done: int) -> int:
    """The first heavy slot at or after a worker's batch index ``done``: the same grid on every rank."""
    return done + (HEAVY_EVERY - 1 - done % HEAVY_EVERY)


class BatchComposer:
    """One worker's buffers -> size-balanced batches, with what is carried or held between buffers.

    A *heavy* sample is larger than a whole balanced batch (``size > target``): no batch holding
    it can be balanced. Left where it falls, it makes one step slow on one rank, and different
    ranks' heavy samples make different steps slow. So heavy samples are held back and released
    at the worker's next *heavy slot* (``heavy_slot``): the worker's batch index grid that every
    rank shares, because every rank's worker streams have the same lengths. Each released heavy
    sample gets a batch of its own with the buffer's ``B - 1`` smallest samples; several make a
    run of consecutive batches from the slot. A heavy sample waits at most until the first
    buffer whose batches reach a slot (the same buffer when it yields ``HEAVY_EVERY`` batches or
    more); the last buffer releases every one still held, at the slot or at the end.
    """

    def __init__(self, sizes, batch_size: int, target: float):
        self.sizes, self.batch_size, self.target = sizes, batch_size, target
        self.carry = self.held = np.zeros(0, np.int64)
        self.done = 0  # batches composed so far: the worker batch index of the next one

    def compose(self, ids: np.ndarray, rng: np.random.Generator, last: bool) -> np.ndarray:
        """One buffer's yield order: ``ids`` with what earlier buffers carried or held, as whole
        batches (the last buffer also yields the final partial batch and everything still held)."""
        b = self.batch_size
        pool = np.concatenate((self.carry, ids))
        heavy = self.sizes[pool] > self.target
        self.held, pool = np.concatenate((self.held, pool[heavy])), pool[~heavy]
        at = heavy_slot(self.done) - self.done  # the slot's batch position in this buffer
        release = self._release(len(pool), at, last)
        by_size = pool[np.argsort(self.sizes[pool], kind="stable")]
        companions, rest = by_size[:(b - 1) * release], by_size[(b - 1) * release:]
        runs = self._heavy_batches(self.held[:release], companions, rng)
        self.held = self.held[release:]
        batched, self.carry = balanced_batches(rest, self.sizes[rest], b, self.target, rng)
        at = b * min(at, len(batched) // b)  # short of the slot only in the last buffer: then at its end
        out = np.concatenate((batched[:at], runs, batched[at:]))
        if last:
            out, self.carry = np.concatenate((out, self.carry)), self.carry[:0]
        self.done += len(out) // b
        return out

    def _release(self, pool_size: int, at: int, last: bool) -> int:
        """How many held samples this buffer releases: every one at the last buffer; when the buffer's
        batches reach the slot (``at`` batches precede it), as many as the samples after those batches
        give ``B - 1`` companions each; none otherwise."""
        room = pool_size - self.batch_size * at
        if last or (room >= 0 and self.batch_size == 1):
            return len(self.held)
        return min(len(self.held), room // (self.batch_size - 1)) if room >= 0 else 0

    def _heavy_batches(self, heavy: np.ndarray, companions: np.ndarray, rng) -> np.ndarray:
        """Each heavy sample followed by its ``B - 1`` companions, the batches' members shuffled; when
        companions run short (only at the end of the last buffer) the last batches are shorter."""
        if len(companions) == len(heavy) * (self.batch_size - 1):
            batches = np.column_stack((heavy, companions.reshape(len(heavy), self.batch_size - 1)))
            return rng.permuted(batches, axis=1).ravel()
        parts = np.array_split(companions, len(heavy))
        return np.concatenate([np.concatenate(([h], c)) for h, c in zip(heavy, parts)])


class SizeGrouper:
    """One worker's buffers -> length-grouped batches (``group_by_size``, for padded models with a fixed B).

    Each buffer's samples (with what the buffer before carried) are sorted by size (ties in random
    order) and cut into batches of ``batch_size``, whose order is then shuffled: a batch holds samples
    of similar size, so padding to its longest wastes little, while the buffer still decides which
    samples meet.  The ``len % batch_size`` left over are chosen at random and carried into the next
    buffer; the last buffer also yields the final partial batch, last.
    """

    def __init__(self, sizes, batch_size: int):
        self.sizes, self.batch_size = sizes, batch_size
        self.carry = np.zeros(0, np.int64)

    def compose(self, ids: np.ndarray, rng: np.random.Generator, last: bool) -> np.ndarray:
        """One buffer's yield order: whole batches of similar sizes, in random order (see the class)."""
        pool = np.concatenate((self.carry, np.asarray(ids, np.int64)))
        spare = 0 if last else len(pool) % self.batch_size
        carried = rng.choice(len(pool), spare, replace=False) if spare else np.zeros(0, np.int64)
        self.carry, pool = pool[carried], np.delete(pool, carried)
        perm = rng.permutation(len(pool))
        by_size = pool[perm[np.argsort(np.asarray(self.sizes[pool[perm]]), kind="stable")]]
        full = len(by_size) // self.batch_size
        batches = by_size[:full * self.batch_size].reshape(full, self.batch_size)[rng.permutation(full)]
        return np.concatenate((batches.ravel(), by_size[full * self.batch_size:]))

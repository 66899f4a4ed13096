"""Size-balanced batch composition inside one shuffle buffer."""
from __future__ import annotations

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
    slots = np.empty((m, batch_size), dtype=np.int64)
    sums, room = np.zeros(m), np.full(m, batch_size)
    for idx, x in zip(by_size.tolist(), sizes[by_size].tolist()):
        lightest = sums[room > 0].min()
        # strictly lighter than lightest + x, so two equal samples never share a batch while an emptier one has room
        near = np.flatnonzero((room > 0) & ((sums < lightest + x) | (sums == lightest)))
        b = near[rng.integers(len(near))]
        room[b] -= 1
        slots[b, room[b]] = idx
        sums[b] += x
    slots = rng.permuted(slots[rng.permutation(m)], axis=1)
    return ids[slots.ravel()], ids[carry]

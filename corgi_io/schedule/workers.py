"""A rank's pieces -> its DataLoader workers."""
from __future__ import annotations

import numpy as np

from corgi_io.arguments import check_at_least
from corgi_io.schedule.pieces import cut, piece_counts, positions


def batch_count(num_samples: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches of ``batch_size`` in ``num_samples``: ``ceil``, or ``floor`` with ``drop_last`` (the tail left out)."""
    check_at_least("batch_size", batch_size, 1)
    return num_samples // batch_size if drop_last else -(-num_samples // batch_size)


def worker_counts(num_samples: int, num_workers: int, batch_size: int = 1, drop_last: bool = False) -> np.ndarray:
    """Samples per worker, in whole batches of ``batch_size``: the rank's ``ceil(n / B)``
    batches (``floor`` with ``drop_last``) are dealt out so that the first ``batches % K``
    workers get one more, and the worker that holds the rank's last batch in the
    DataLoader's round-robin order takes the short remainder (the only count that is not a
    multiple of ``B``; with ``drop_last`` there is none and the ``n % B`` tail is left out).

    Depends on ``(n, K, B)`` only, so equal per-rank counts give equal step counts, and
    ``len(DataLoader) == ceil(n / B)``.  ``batch_size=1`` is the plain sample split: the
    first ``n % K`` workers get one sample more.
    """
    k, b = max(1, num_workers), int(batch_size)
    batches = batch_count(num_samples, b, drop_last)
    counts = (batches // k + (np.arange(k) < batches % k)).astype(np.int64) * b
    if not drop_last and batches:
        counts[(batches - 1) % k] -= batches * b - num_samples  # the last batch dealt is the short one
    return counts


def split_workers(pieces: np.ndarray, num_workers: int, batch_size: int = 1,
                  drop_last: bool = False) -> list[np.ndarray]:
    """Cut a rank's pieces (read order) into ``max(1, num_workers)`` contiguous
    runs with ``worker_counts`` samples each (``num_workers=0`` is the main
    process alone). Splitting by samples, not blocks, keeps the counts exact at
    the cost of at most ``K - 1`` extra reads; nothing overlaps, and nothing is
    lost but the ``n % B`` tail that ``drop_last`` leaves out."""
    return [worker_share(pieces, num_workers, k, batch_size, drop_last) for k in range(max(1, num_workers))]


def worker_share(pieces: np.ndarray, num_workers: int, worker: int, batch_size: int = 1,
                 drop_last: bool = False) -> np.ndarray:
    """Worker ``worker``'s run of ``split_workers(pieces, num_workers, batch_size, drop_last)``, cutting only
    its own."""
    pieces = np.asarray(pieces, dtype=np.int64).reshape(-1, 3)
    counts = worker_counts(int(piece_counts(pieces).sum()), num_workers, batch_size, drop_last)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    return cut(pieces, int(bounds[worker]), int(bounds[worker + 1]), positions(pieces))

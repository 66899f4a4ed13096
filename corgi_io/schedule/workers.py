"""A rank's pieces -> its DataLoader workers."""
from __future__ import annotations

import numpy as np

from .pieces import cut, piece_counts, positions


def worker_counts(num_samples: int, num_workers: int) -> np.ndarray:
    """Samples per worker: the first ``n % K`` workers get one more. Depends on
    ``(n, K)`` only, so equal per-rank counts give equal step counts."""
    k = max(1, num_workers)
    return num_samples // k + (np.arange(k) < num_samples % k).astype(np.int64)


def split_workers(pieces: np.ndarray, num_workers: int) -> list[np.ndarray]:
    """Cut a rank's pieces (read order) into ``max(1, num_workers)`` contiguous
    runs with ``worker_counts`` samples each (``num_workers=0`` is the main
    process alone). Splitting by samples, not blocks, keeps the counts exact at
    the cost of at most ``K - 1`` extra reads; nothing overlaps or is lost."""
    return [worker_share(pieces, num_workers, k) for k in range(max(1, num_workers))]


def worker_share(pieces: np.ndarray, num_workers: int, worker: int) -> np.ndarray:
    """Worker ``worker``'s run of ``split_workers(pieces, num_workers)``, cutting only its own."""
    pieces = np.asarray(pieces, dtype=np.int64).reshape(-1, 3)
    bounds = np.concatenate(([0], np.cumsum(worker_counts(int(piece_counts(pieces).sum()), num_workers))))
    return cut(pieces, int(bounds[worker]), int(bounds[worker + 1]), positions(pieces))

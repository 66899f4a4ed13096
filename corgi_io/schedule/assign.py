"""Blocks -> ranks: every rank gets exactly the same number of samples.

All modes cut the same epoch sequence (the blocks in ``block_order``, sample
after sample, repeated periodically for padding): the first ``W * n``
positions. So the multiset of samples read in an epoch is the same in every
mode; only who reads what differs. See docs/algorithms.md.
"""
from __future__ import annotations

import numpy as np

from .balance import place, rank_budgets
from .order import BALANCE, block_order, epoch_rng
from .modes import BALANCE_MODES, check_mode
from .pieces import EMPTY, block_pieces, cut, merge_adjacent, piece_samples



def samples_per_rank(num_samples: int, world_size: int, drop_last: bool = False) -> int:
    """Samples every rank reads in an epoch: ``ceil(N / W)`` when padding,
    ``floor(N / W)`` with ``drop_last`` (0 when N < W: every plan is empty)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return num_samples // world_size if drop_last else -(-num_samples // world_size)


def assign_ranks(block_first, block_count, world_size: int, *, seed: int, epoch: int,
                 balance: str = "count", drop_last: bool = False, sizes=None,
                 cost_model=None, partitions=None, shuffle_blocks: bool = True) -> list[np.ndarray]:
    """Per rank, its pieces (int64 (P, 3) rows ``(block, start, stop)``) in read order.

    Every rank gets exactly ``n = samples_per_rank(N, W, drop_last)`` samples.
    Without ``drop_last`` every sample is read at least once and the
    ``W * n - N`` extra reads repeat the head of the epoch sequence (padding);
    with it, ``N - W * n`` samples at the tail of the epoch sequence are
    skipped and none repeats.

    ``balance``:
      - ``"count"``: rank r takes positions ``[r*n, (r+1)*n)`` of the epoch
        sequence (CorgiPile's contiguous slice, made sample-exact);
      - ``"size"``: the same samples placed so that the per-rank sums of
        ``sizes`` are as equal as possible (never worse than ``"count"``);
      - ``"dynamic"``: per-rank size budgets that equalise predicted time
        ``a_r * size + b_r * n`` under ``cost_model`` (float (W, 2)).

    ``partitions``: optional ``block_owner`` int array (one rank per block);
    a rank then reads only its own blocks, ``n`` becomes the largest
    partition's count (padding repeats the rank's own samples) or, with
    ``drop_last``, the smallest one's.

    Reads follow the epoch block order (seeded by ``seed, epoch``, the same on
    every rank); ``shuffle_blocks=False`` uses the natural block order instead
    (the loader's ``shuffle="none"``).
    """
    block_first = np.asarray(block_first, dtype=np.int64)
    block_count = np.asarray(block_count, dtype=np.int64)
    check_mode("balance", balance, BALANCE_MODES)
    if balance != "count" and sizes is None:
        raise ValueError(f"balance={balance!r} needs sizes")
    if balance == "dynamic" and cost_model is None:
        raise ValueError("balance='dynamic' needs cost_model")
    if sizes is not None and len(sizes) != block_count.sum():
        raise ValueError(f"sizes has {len(sizes)} entries for {block_count.sum()} samples")
    order = block_order(len(block_count), seed, epoch, shuffle_blocks)
    cost = np.asarray(cost_model, np.float64) if balance == "dynamic" else np.tile([1.0, 0.0], (world_size, 1))
    prefix = None if sizes is None else np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    if partitions is not None:
        return _partitioned(order, block_first, block_count, world_size, np.asarray(partitions),
                            balance, drop_last, prefix, cost)
    n = samples_per_rank(int(block_count.sum()), world_size, drop_last)
    if n == 0:
        return [EMPTY.copy() for _ in range(world_size)]
    sequence = block_pieces(order, block_first, block_count)
    by_count = [cut(sequence, r * n, (r + 1) * n) for r in range(world_size)]
    if balance == "count":
        return by_count
    units = cut(sequence, 0, world_size * n)
    total = float(prefix[units[:, 2]].sum() - prefix[units[:, 1]].sum())
    budgets = rank_budgets(total, n, cost if balance == "dynamic" else None, world_size)
    plans = place(units, n, budgets, prefix, cost, epoch_rng(seed, epoch, BALANCE))
    plans = [merge_adjacent(p) for p in plans]
    return plans if rank_time(plans, prefix, cost) <= rank_time(by_count, prefix, cost) else by_count


def rank_time(plans: list[np.ndarray], prefix: np.ndarray, cost: np.ndarray) -> float:
    """Slowest rank's predicted time ``max_r a_r * size_r + b_r * count_r``."""
    size = np.array([(prefix[p[:, 2]] - prefix[p[:, 1]]).sum() for p in plans], np.float64)
    count = np.array([(p[:, 2] - p[:, 1]).sum() for p in plans], np.float64)
    return float((cost[:, 0] * size + cost[:, 1] * count).max())


def _partitioned(order, block_first, block_count, world_size, owner, balance, drop_last, prefix, cost):
    """Plans where rank r reads only blocks with ``owner == r``: rank r takes
    ``n`` positions of its own periodic sequence from offset ``off_r`` (0 for
    "count"; for the size modes the offset whose window sum is closest to the
    rank's budget)."""
    if owner.shape != block_count.shape or owner.min(initial=0) < 0 or owner.max(initial=0) >= world_size:
        raise ValueError(f"partitions must give each of {len(block_count)} blocks a rank in [0, {world_size})")
    own = [block_pieces(order[owner[order] == r], block_first, block_count) for r in range(world_size)]
    have = np.array([(o[:, 2] - o[:, 1]).sum() for o in own])
    n = int(have.min() if drop_last else have.max())
    if n == 0:
        return [EMPTY.copy() for _ in range(world_size)]
    if (have == 0).any():
        raise ValueError(f"ranks {np.flatnonzero(have == 0).tolist()} own no samples and cannot pad")
    offsets = np.zeros(world_size, np.int64)
    if balance != "count":
        ids = [piece_samples(o) for o in own]
        sums = [prefix[i + 1] - prefix[i] for i in ids]
        expect = sum(float(s.sum()) * n / len(s) for s in sums)
        budgets = rank_budgets(expect, n, cost if balance == "dynamic" else None, world_size)
        for r, s in enumerate(sums):
            laps, rest = divmod(n, len(s))
            ring = np.concatenate(([0], np.cumsum(np.concatenate((s, s)))))
            window = laps * ring[len(s)] + ring[np.arange(len(s)) + rest] - ring[:len(s)]
            offsets[r] = np.argmin(np.abs(window - budgets[r]))
    plans = [cut(o, off, off + n) for o, off in zip(own, offsets)]
    if balance == "count":
        return plans
    by_count = [cut(o, 0, n) for o in own]
    return plans if rank_time(plans, prefix, cost) <= rank_time(by_count, prefix, cost) else by_count


"""Per-rank planning cost at cluster scale, on synthetic block tables (no shard files).

For N samples in blocks of --block-samples, W ranks and K workers per rank, with balance "count" and
"size", it prints one line per result:

* per-rank: seconds of one rank's `rank_plan` (what a rank computes once per epoch; rank W/2);
* per-worker: the most seconds a worker adds on top (its `worker_share` and its first buffer);
* peak: the largest transient memory of the per-rank plan (tracemalloc, a separate run);
* read: the blocks whose per-sample sizes the plan read. They are made on demand, block by block, so
  the per-sample column (8 GB at 10^9) never exists: what the plan does not read does not cost.

Baselines, measured in the same run: for count, the plan as it was before per-rank planning, which
every worker of every rank computed: all W ranks' slices, each cut recomputing the positions of the
whole sequence. For size, the target (today's size balance needs the whole per-sample column and
O(W) work per block; the issue measured 40 s and 16 GB at 10^9 / 4096). Size lines also give the
balance, the max/mean of the per-rank size sums, against count balance's.

Targets at N = 10^9, W = 4096: count <= 1 s per rank; size <= 5 s per rank; per worker <= 0.2 s;
transient memory <= 1 GB (checked on every line; they are stated for the largest case).

Sizes: block b holds 1000 x (its count) x s_b x (1 + 4% noise) in all, s_b lognormal(sigma 0.3)
(blocks differ, as sources and resolutions do); its samples split that sum by lognormal(sigma 1)
weights drawn from a generator keyed by (seed, b).

    python bench/plan_scale.py [--samples 1e7 1e8 1e9] [--world-sizes 64 1024 4096] [--workers 8]
"""
from __future__ import annotations

import argparse
import functools
import time
import tracemalloc
from dataclasses import replace

import numpy as np

from corgi_io.schedule import (BlockTable, EpochSequence, EpochSpec, buffer_plan, cut, plan_epoch, rank_plan,
                               worker_share)

TARGET_COUNT_S, TARGET_SIZE_S, TARGET_WORKER_S, TARGET_PEAK = 1.0, 5.0, 0.2, 1 << 30


class LazySizes:
    """Per-sample sizes made on demand, one block at a time; ``read`` holds the blocks asked for."""

    def __init__(self, first: np.ndarray, count: np.ndarray, size_sum: np.ndarray, seed: int):
        self.first, self.count, self.size_sum, self.seed = first, count, size_sum, seed
        self.read: set[int] = set()

    def __getitem__(self, key: slice) -> np.ndarray:
        b = int(np.searchsorted(self.first, key.start, "right")) - 1
        if key.stop > self.first[b] + self.count[b]:
            raise IndexError(f"samples [{key.start}, {key.stop}) cross the end of block {b}")
        self.read.add(b)
        return self.block(b)[key.start - self.first[b]:key.stop - self.first[b]]

    @functools.lru_cache(maxsize=64)
    def block(self, b: int) -> np.ndarray:
        """Block b's sample sizes: at least 1 each, summing to its size sum exactly."""
        c, total = int(self.count[b]), int(self.size_sum[b])
        weights = np.random.default_rng((self.seed, b)).lognormal(0.0, 1.0, c)
        sizes = 1 + np.floor(weights / weights.sum() * (total - c)).astype(np.int64)
        sizes[:total - int(sizes.sum())] += 1
        return sizes

    def reset(self) -> None:
        self.read.clear()
        self.block.cache_clear()


def synthetic_table(num_samples: int, block_samples: int, seed: int) -> BlockTable:
    first = np.arange(0, num_samples, block_samples, dtype=np.int64)
    count = np.diff(np.append(first, num_samples))
    rng = np.random.default_rng(seed)
    scale = rng.lognormal(0.0, 0.3, len(first)) * (1 + 0.04 * rng.standard_normal(len(first)))
    size_sum = np.maximum(count, 1000 * count * scale).astype(np.int64)
    return BlockTable(first, count, size_sum, LazySizes(first, count, size_sum, seed))


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    """Best wall time of ``fn()`` over up to ``repeat`` runs (one when a run takes over 0.5 s), and its value."""
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
        if best > 0.5:
            break
    return best, value


def peak_bytes(fn) -> int:
    """Peak memory allocated while ``fn()`` runs, above what was allocated before."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def all_ranks_count_plan(table: BlockTable, spec: EpochSpec) -> list[np.ndarray]:
    """The count plan as every worker computed it before per-rank planning: all W slices, each cut
    recomputing the positions of the whole sequence."""
    pieces = EpochSequence.of_epoch(table, spec).pieces
    n = spec.samples_per_rank(table.num_samples)
    return [cut(pieces, r * n, (r + 1) * n) for r in range(spec.world_size)]


def worker_seconds(pieces: np.ndarray, spec: EpochSpec, rank: int) -> float:
    """The slowest worker's share and first buffer, given its rank's pieces."""
    def one(k):
        return next(iter(buffer_plan(worker_share(pieces, spec.num_workers, k), **spec.stream(rank, k))), None)
    return max(timed(lambda k=k: one(k))[0] for k in range(max(1, spec.num_workers)))


def mark(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


def balance_note(table: BlockTable, spec: EpochSpec) -> str:
    """Max/mean of every rank's size sum under this plan, and under count balance."""
    loads = np.array([table.sizes_of(p).sum() for p in plan_epoch(table, spec).ranks()], np.float64)
    by_count = plan_epoch(table, replace(spec, balance="count")).rank_sizes(table)
    return f"  size max/mean {loads.max() / loads.mean():.4f} (count {by_count.max() / by_count.mean():.4f})"


def measure(table: BlockTable, spec: EpochSpec) -> str:
    """The result line of one (N, W, balance)."""
    rank, sizes = spec.world_size // 2, table.sizes
    sizes.reset()
    seconds, pieces = timed(lambda: rank_plan(table, spec, rank))
    read = len(sizes.read)
    sizes.reset()
    peak = peak_bytes(lambda: rank_plan(table, spec, rank))
    worker = worker_seconds(pieces, spec, rank)
    if spec.balance == "count":
        before, _ = timed(lambda: all_ranks_count_plan(table, spec), repeat=1)
        per_rank = (f"per-rank {seconds:.4f} s (<= {TARGET_COUNT_S:g} s {mark(seconds, TARGET_COUNT_S)}; "
                    f"all-ranks plan of before {before:.3f} s: {before / seconds:,.0f}x faster)")
        note = ""
    else:
        per_rank = (f"per-rank {seconds:.3f} s (<= {TARGET_SIZE_S:g} s {mark(seconds, TARGET_SIZE_S)}; "
                    f"{seconds / TARGET_SIZE_S:.2f} of the target)")
        note = balance_note(table, spec)
    return (f"plan_scale N={table.num_samples:.0e} W={spec.world_size:<4} K={spec.num_workers} {spec.balance:<5} "
            f"{per_rank}  per-worker {worker:.4f} s (<= {TARGET_WORKER_S:g} s {mark(worker, TARGET_WORKER_S)})  "
            f"peak {peak / 2**20:,.0f} MB (<= 1 GB {mark(peak, TARGET_PEAK)})  "
            f"sizes read for {read:,} of {len(table.count):,} blocks{note}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=float, nargs="+", default=[1e7, 1e8, 1e9])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--block-samples", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"plan_scale: blocks of {args.block_samples}, K={args.workers}, one epoch; targets at N=1e+09 W=4096: "
          f"count <= {TARGET_COUNT_S:g} s, size <= {TARGET_SIZE_S:g} s per rank, per-worker <= {TARGET_WORKER_S:g} s, "
          f"peak <= 1 GB", flush=True)
    for num_samples in args.samples:
        table = synthetic_table(int(num_samples), args.block_samples, args.seed)
        for world_size in args.world_sizes:
            for balance in ("count", "size"):
                spec = EpochSpec(world_size, seed=args.seed, epoch=1, balance=balance, num_workers=args.workers)
                print(measure(table, spec), flush=True)


if __name__ == "__main__":
    main()

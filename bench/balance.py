"""Size balance across ranks: count vs size vs size + balanced batches, simulated, no data read.

For each size distribution and world size it runs the real epoch plan (`corgi_io.schedule.simulate`:
assign, worker split, buffer plan, DataLoader batch order) under three plans and prints one line each:

* ``count``: equal sample counts, plain CorgiPile shuffle (what DistributedSampler-style loaders do);
* ``size``: equal counts and equal per-rank size sums, plain shuffle;
* ``size+batches``: size balance plus size-balanced batches inside each buffer.

Each line holds the epoch max/mean of per-rank size sums, the per-step imbalance (max over ranks /
mean of a step's per-rank batch size sums; p95 and max over steps) and the synchronous epoch time
(sum over steps of the slowest rank's batch size sum: time ~ size) relative to the count line.
Targets: epoch max/mean <= 1.02; step p95 <= 1.10 (with balanced batches); >= 1.2x faster than count
on the lognormal (video) case.

Distributions (synthetic ones in blocks of --block-samples, sizes i.i.d.):

* video: frame counts, lognormal with median 300 and sigma 1;
* text: token counts, 80% lognormal (median 250, sigma 1.2) and 20% a Pareto (alpha 1.2) tail from
  1,000 tokens, capped at a 32,768-token context;
* dataset: the sizes and blocks of a packed dataset (--dataset DIR).

    python bench/balance.py [--samples 200000] [--world-sizes 8 64] [--batch-size 32] [--dataset DIR]
"""
from __future__ import annotations

import argparse

import numpy as np

from corgi_io.manifest import open_manifest
from corgi_io.schedule import BlockTable, EpochSpec, simulate

PLANS = (("count", "count", False), ("size", "size", False), ("size+batches", "size", True))
TARGET_EPOCH, TARGET_STEP_P95, TARGET_SPEEDUP = 1.02, 1.10, 1.2


def video_frames(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.maximum(1, np.rint(rng.lognormal(np.log(300), 1.0, n))).astype(np.int64)


def text_tokens(n: int, rng: np.random.Generator) -> np.ndarray:
    body = rng.lognormal(np.log(250), 1.2, n)
    tail = 1000 * (1 + rng.pareto(1.2, n))
    return np.clip(np.rint(np.where(rng.random(n) < 0.8, body, tail)), 1, 32768).astype(np.int64)


def synthetic(sizes: np.ndarray, block_samples: int) -> tuple:
    """(block_first, block_count, sizes) with blocks of ``block_samples`` consecutive samples."""
    first = np.arange(0, len(sizes), block_samples)
    return first, np.diff(np.append(first, len(sizes))), sizes


def mark(ok: bool) -> str:
    return "met" if ok else "MISSED"


def compare(name: str, case: tuple, world_size: int, args, speed_target: bool) -> None:
    """Print the count, size and size+batches lines of one distribution at one world size."""
    first, count, sizes = case
    table, base = BlockTable.from_sizes(first, count, sizes), None
    for label, balance, batched in PLANS:
        spec = EpochSpec(world_size, seed=args.seed, balance=balance, buffer_pieces=args.buffer_blocks,
                         batch_size=args.batch_size if batched else None)
        sim = simulate(table, spec, batch_size=args.batch_size)
        base = sim["epoch_time"] if base is None else base
        epoch, step, speedup = sim["size_imbalance"], sim["step_imbalance"], base / sim["epoch_time"]
        line = (f"balance {name:<7} W={world_size:<3} N={len(sizes):<8,} {label:<13} epoch max/mean {epoch:.4f}"
                + (f" (<= {TARGET_EPOCH} {mark(epoch <= TARGET_EPOCH)})" if balance != "count" else "")
                + f"  step p95 {step['p95']:.3f}"
                + (f" (<= {TARGET_STEP_P95} {mark(step['p95'] <= TARGET_STEP_P95)})" if batched else "")
                + f" max {step['max']:.3f}  time "
                + (f"{speedup:.2f}x faster than count" if balance != "count" else "1.00x (baseline)"))
        if batched and speed_target:
            line += f" (>= {TARGET_SPEEDUP}x {mark(speedup >= TARGET_SPEEDUP)})"
        print(line, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200_000, help="synthetic samples per distribution")
    parser.add_argument("--block-samples", type=int, default=64)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--buffer-blocks", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", help="also a packed dataset's sizes and blocks (a `corgi pack` OUTPUT)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = [("video", synthetic(video_frames(args.samples, rng), args.block_samples), True),
             ("text", synthetic(text_tokens(args.samples, rng), args.block_samples), False)]
    if args.dataset:
        m = open_manifest(args.dataset)
        cases.append(("dataset", (m.blocks.first, m.blocks.count, m.samples.size), False))
    print(f"balance: B={args.batch_size} per rank, {args.buffer_blocks}-block buffers, 1 worker per rank, "
          f"time ~ size; targets: epoch max/mean <= {TARGET_EPOCH}, step p95 <= {TARGET_STEP_P95}, "
          f">= {TARGET_SPEEDUP}x faster than count (lognormal video)")
    for name, case, speed_target in cases:
        for world_size in args.world_sizes:
            compare(name, case, world_size, args, speed_target)


if __name__ == "__main__":
    main()

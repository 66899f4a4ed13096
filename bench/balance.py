"""Rank balance: count vs size vs dynamic, with and without balanced batches, simulated, no data read.

For each size distribution and world size it runs the real epoch plan (`corgi_io.schedule.simulation`:
assign, worker split, buffer plan, DataLoader batch order) under three plans and prints one line each:

* ``count``: equal sample counts, plain CorgiPile shuffle (what DistributedSampler-style loaders do);
* ``count+batches``: equal counts, size-balanced batches inside each buffer (``Batches(B)``);
* ``size+batches``: equal counts and equal per-rank size sums, size-balanced batches, samples larger
  than a balanced batch held for a step every rank shares (what ``Ranks(balance="size"), Batches(B)`` does;
  the loader refuses ``Ranks(balance="size")`` without batches: its steps are slower than count's).

Each line holds the epoch max/mean of per-rank size sums, the per-step imbalance (max over ranks /
mean of a step's per-rank batch size sums; p95 and max over steps) and the synchronous epoch time
(sum over steps of the slowest rank's batch size sum: time ~ size) relative to the count line of the
same run. Targets: epoch max/mean <= 1.02; step p95 <= 1.10; size+batches never slower than
count+batches; >= 1.2x faster than count on the lognormal (video) case.

Then dynamic balance at the first world size, half the ranks twice as slow (time = a_r * size, a_r 1
or 2), against the ideal ``total size / sum(1 / a_r)``: "epoch" is the slowest rank's whole epoch
(``max_r a_r * size_r``, target within 5 % of the ideal), "steps" the synchronous time (the sum over
steps of the slowest rank's batch). Three layouts: sizes
i.i.d. within blocks (the video sizes) in blocks of --block-samples, the same in blocks of 4, and
blocks whose size scale differs (lognormal per block, as sources and resolutions do); buffers hold
as many samples as --buffer-blocks blocks of --block-samples.

Distributions (synthetic ones in blocks of --block-samples, sizes i.i.d.):

* video: frame counts, lognormal with median 300 and sigma 1;
* text: token counts, 80% lognormal (median 250, sigma 1.2) and 20% a Pareto (alpha 1.2) tail from
  1,000 tokens, capped at a 32,768-token context;
* dataset: the sizes and blocks of a packed dataset (--dataset DIR).

    python bench/balance.py [--samples 200000] [--world-sizes 8 64] [--batch-size 32] [--workers 1]
                            [--dataset DIR]
"""
from __future__ import annotations

import argparse

import numpy as np

from corgi_io.manifest import open_manifest
from corgi_io.schedule import BlockTable, EpochSpec, simulate

PLANS = (("count", "count", False), ("count+batches", "count", True), ("size+batches", "size", True))
DYNAMIC_PLANS = (("count", "count", False), ("size+batches", "size", True), ("dynamic+batches", "dynamic", True))
TARGET_EPOCH, TARGET_STEP_P95, TARGET_SPEEDUP, TARGET_IDEAL = 1.02, 1.10, 1.2, 1.05


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


def blocky(sizes: np.ndarray, block_samples: int, rng: np.random.Generator) -> tuple:
    """``synthetic`` blocks whose sizes are scaled by a lognormal factor per block (sources, resolutions)."""
    first, count, _ = synthetic(sizes, block_samples)
    return first, count, np.maximum(1, sizes * np.repeat(rng.lognormal(0, 1, len(count)), count)).astype(np.int64)


def mark(ok: bool) -> str:
    return "met" if ok else "MISSED"


def run(table: BlockTable, world_size: int, balance: str, batched: bool, args, cost_model=None,
        buffer_pieces: int | None = None) -> dict:
    """``simulate`` one plan with the bench's options (buffers of --buffer-blocks pieces by default)."""
    spec = EpochSpec(world_size, seed=args.seed, balance=balance, buffer_pieces=buffer_pieces or args.buffer_blocks,
                     num_workers=args.workers, batch_size=args.batch_size if batched else None)
    return simulate(table, spec, batch_size=args.batch_size, cost_model=cost_model)


def compare(name: str, case: tuple, world_size: int, args, speed_target: bool) -> None:
    """Print the count, count+batches and size+batches lines of one distribution at one world size."""
    table, base = BlockTable.from_sizes(*case), None
    for label, balance, batched in PLANS:
        sim = run(table, world_size, balance, batched, args)
        base = base or sim["epoch_time"]
        epoch, step, speedup, sized = sim["size_imbalance"], sim["step_imbalance"], base / sim["epoch_time"], balance != "count"
        line = (f"balance {name:<7} W={world_size:<3} N={table.num_samples:<8,} {label:<13} epoch max/mean {epoch:.4f}"
                + (f" (<= {TARGET_EPOCH} {mark(epoch <= TARGET_EPOCH)})" if sized else "")
                + f"  step p95 {step['p95']:.3f}"
                + (f" (<= {TARGET_STEP_P95} {mark(step['p95'] <= TARGET_STEP_P95)})" if sized else "")
                + f" max {step['max']:.3f}  time "
                + (f"{speedup:.2f}x faster than count" if label != "count" else "1.00x (baseline)"))
        if sized:  # simulate's own baseline is count with the same balanced batches
            line += f" ({sim['speedup']:.3f}x count+batches: >= 1 {mark(sim['speedup'] >= 1.0)})"
        if sized and speed_target:
            line += f" (>= {TARGET_SPEEDUP}x {mark(speedup >= TARGET_SPEEDUP)})"
        print(line, flush=True)


def compare_dynamic(name: str, case: tuple, world_size: int, args) -> None:
    """Print count, size+batches and dynamic+batches with half the ranks twice as slow, against the ideal
    synchronous time ``total size / sum(1 / a_r)``."""
    table, base = BlockTable.from_sizes(*case), None
    buffer_pieces = round(args.buffer_blocks * args.block_samples / case[1].mean())  # the same samples per buffer
    cost = np.repeat([[1.0, 0.0], [2.0, 0.0]], [world_size - world_size // 2, world_size // 2], axis=0)
    for label, balance, batched in DYNAMIC_PLANS:
        sim = run(table, world_size, balance, batched, args, cost_model=cost, buffer_pieces=buffer_pieces)
        base = base or sim["epoch_time"]
        ideal = sim["rank_size"].sum() / (1 / cost[:, 0]).sum()
        epoch, steps = (cost[:, 0] * sim["rank_size"]).max() / ideal, sim["epoch_time"] / ideal
        print(f"dynamic {name:<12} W={world_size:<3} N={table.num_samples:<8,} speeds 2:1 {label:<16}"
              f"epoch {epoch:.3f}x ideal" + (f" (<= {TARGET_IDEAL} {mark(epoch <= TARGET_IDEAL)})" if balance == "dynamic" else "")
              + f"  steps {steps:.3f}x ideal"
              + (f"  {base / sim['epoch_time']:.2f}x faster than count" if label != "count" else "  (baseline)"),
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200_000, help="synthetic samples per distribution")
    parser.add_argument("--block-samples", type=int, default=64)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--buffer-blocks", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", help="also a packed dataset's sizes and blocks (a `corgi pack` OUTPUT)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = [("video", synthetic(video_frames(args.samples, rng), args.block_samples), True),
             ("text", synthetic(text_tokens(args.samples, rng), args.block_samples), False)]
    if args.dataset:
        m = open_manifest(args.dataset)
        cases.append(("dataset", (m.blocks.first, m.blocks.count, m.samples.size), False))
    print(f"balance: B={args.batch_size} per rank, {args.buffer_blocks}-block buffers, {args.workers} worker(s) "
          f"per rank, time ~ size; targets: epoch max/mean <= {TARGET_EPOCH}, step p95 <= {TARGET_STEP_P95}, "
          f"size+batches >= count+batches, >= {TARGET_SPEEDUP}x faster than count (lognormal video), "
          f"dynamic <= {TARGET_IDEAL}x ideal")
    for name, case, speed_target in cases:
        for world_size in args.world_sizes:
            compare(name, case, world_size, args, speed_target)
    video = cases[0][1][2]
    for name, case in (("video-iid", synthetic(video, args.block_samples)), ("video-iid/4", synthetic(video, 4)),
                       ("video-blocky", blocky(video, args.block_samples, rng))):
        compare_dynamic(name, case, args.world_sizes[0], args)


if __name__ == "__main__":
    main()

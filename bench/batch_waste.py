"""Padding waste of fixed-size batches on a long-tailed token corpus: random, size-balanced, HF-style length
grouping and corgi's `Batches(B, group_by_size=True)`, from the pure planner (no I/O).

    python bench/batch_waste.py [--n 200000] [--budget 16384] [--block 256] [--buffer-blocks 16]

Token lengths are lognormal (median 300, sigma 1, at most 8,192).  B is the batch size whose mean tokens
is the budget T (issue 20: "fixed-B random batches of the same mean tokens").  A padded batch costs B x its
longest sample; waste = (padded tokens - real tokens) / padded tokens, over the whole epoch.  Baseline:
random batches (a full shuffle, cut every B).  HF's `group_by_length` sorts megabatches of 50 x B random
samples by length.  corgi: one worker's CorgiPile stream with size-balanced batches (the default), then with
`Batches(B, group_by_size=True)`.  The seed changes the corpus; each line gives the median of --rounds seeds.

Then budgeted batches (`Budget(T)`, `Ranks(balance="size")`, --world ranks of one worker each) under both cost
models: padding waste, the p95 over steps of max rank cost / mean rank cost (goal <= 1.05), the mean
fill (a batch's cost / T), and the planning time of one rank's epoch (every rank's fewest counts included).
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

import time

from corgi_io.schedule import (BatchBudget, BlockTable, BudgetPlanner, block_order, block_pieces, buffer_plan,
                               loader_planner)


def lengths(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(np.round(rng.lognormal(np.log(300), 1.0, n)), 8192).astype(np.int64) + 1


def waste(order: np.ndarray, sizes: np.ndarray, batch_size: int) -> float:
    full = len(order) // batch_size * batch_size
    batches = sizes[order[:full]].reshape(-1, batch_size)
    return 1 - batches.sum() / (batches.max(axis=1).sum() * batch_size)


def hf_group_by_length(sizes: np.ndarray, batch_size: int, rng) -> np.ndarray:
    """transformers' LengthGroupedSampler: a random permutation cut in megabatches of 50 x B, each sorted by
    length (longest first)."""
    perm = rng.permutation(len(sizes))
    mega = 50 * batch_size
    return np.concatenate([m[np.argsort(-sizes[m], kind="stable")] for m in np.split(perm, range(mega, len(perm), mega))])


def corgi(sizes: np.ndarray, batch_size: int, args, seed: int, group: bool) -> np.ndarray:
    count = np.full(-(-len(sizes) // args.block), args.block)
    count[-1] = len(sizes) - args.block * (len(count) - 1)
    first = np.arange(len(count)) * args.block
    pieces = block_pieces(block_order(len(count), seed, 0), first, count)
    return np.concatenate([o for _, o in buffer_plan(pieces, buffer_pieces=args.buffer_blocks, seed=seed,
                                                     sizes=sizes, batch_size=batch_size, group_by_size=group)])


def budgeted(sizes: np.ndarray, args, seed: int, cost: str) -> tuple:
    """(padding waste, p95 of max/mean rank cost per step, mean fill, seconds to plan rank 0) of one epoch
    of `Budget(args.budget)` batches over `args.world` size-balanced ranks."""
    first = np.arange(0, len(sizes), args.block)
    count = np.minimum(args.block, len(sizes) - first)
    base = loader_planner(BlockTable.from_sizes(first, count, sizes), args.world, 0, shuffle="corgipile",
                          buffer_blocks=args.buffer_blocks, seed=seed, balance="size", drop_last=False, batch_size=None)
    planner = BudgetPlanner(base, BatchBudget(args.budget, cost))
    start = time.perf_counter()
    planner.rank_batches(0)
    seconds = time.perf_counter() - start
    ranks = [[batch for _, batch in planner.plan(rank, 0, 1)] for rank in range(args.world)]
    real = np.array([[sizes[b].sum() for b in batches] for batches in ranks], np.float64)
    padded = np.array([[len(b) * sizes[b].max() for b in batches] for batches in ranks], np.float64)
    paid = padded if cost == "padded" else real
    p95 = float(np.percentile(paid.max(axis=0) / paid.mean(axis=0), 95))
    return 1 - real.sum() / padded.sum(), p95, float(paid.mean() / args.budget), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--budget", type=int, default=16384)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--buffer-blocks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--world", type=int, default=8)
    args = parser.parse_args()
    results = {"random batches (baseline)": [], "corgipile size-balanced": [], "HF group_by_length": [],
               "corgipile group_by_size": []}
    for seed in range(args.rounds):
        sizes = lengths(args.n, seed)
        b = max(1, round(args.budget / sizes.mean()))
        rng = np.random.default_rng(seed)
        results["random batches (baseline)"].append(waste(rng.permutation(len(sizes)), sizes, b))
        results["corgipile size-balanced"].append(waste(corgi(sizes, b, args, seed, False), sizes, b))
        results["HF group_by_length"].append(waste(hf_group_by_length(sizes, b, rng), sizes, b))
        results["corgipile group_by_size"].append(waste(corgi(sizes, b, args, seed, True), sizes, b))
    base = statistics.median(results["random batches (baseline)"])
    print(f"# {args.n} lognormal lengths (median 300, sigma 1, max 8192), mean {sizes.mean():.0f}; B = {b} "
          f"(mean tokens = budget {args.budget}); corgi buffers of {args.buffer_blocks} blocks of {args.block}; "
          f"median of {args.rounds} seeds")
    for name, got in results.items():
        w = statistics.median(got)
        print(f"batch_waste {name:28s} padding waste {100 * w:5.1f}%  ratio {w / base:5.2f}x vs random batches")
    budget_lines(args)


def budget_lines(args) -> None:
    """The budgeted batches' lines (median of --rounds seeds), against the random batches' waste."""
    for cost in ("padded", "sum"):
        got = [budgeted(lengths(args.n, seed), args, seed, cost) for seed in range(args.rounds)]
        w, p95, fill, seconds = (statistics.median(column) for column in zip(*got))
        base = statistics.median(waste(np.random.default_rng(seed).permutation(args.n), lengths(args.n, seed),
                                       max(1, round(args.budget / lengths(args.n, seed).mean())))
                                 for seed in range(args.rounds))
        print(f"batch_waste corgipile Budget(T) {cost:6s}         padding waste {100 * w:5.1f}%  ratio {w / base:5.2f}x "
              f"vs random batches; p95 max/mean rank cost {p95:.3f} (goal <= 1.05) over {args.world} ranks; "
              f"fill {100 * fill:.1f}% of T; plan {seconds:.2f} s")


if __name__ == "__main__":
    main()

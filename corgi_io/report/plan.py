"""What `corgi plan` shows: one epoch's rank assignment and its simulated synchronous steps.

`summarize` computes JSON-ready data from the manifest's arrays through the pure
planner (`corgi_io.schedule`: `epoch_plans`, `split_workers`, `simulate`, all given one
`EpochSpec`), and the shuffle quality of rank 0's order (`schedule/shuffle_quality.py`); `render` turns it into
terminal text.  `price_run` prices a run from the loader's plan of each epoch and a `RunModel` of the machine
(`schedule/run_model.py`: wall time, remote bytes, cache hits, memory), `render_run` gives its text.  Nothing
here reads data or imports torch.

The step model is the planner's: a step lasts as long as its slowest rank, and a
rank's step time is proportional to the size sum of its batch. Speed-ups are
against count balance with plain CorgiPile shuffling (what DistributedSampler-style
loaders do), so "size + batches" shows the gain of both measures together.
"""
from __future__ import annotations

import numpy as np

from dataclasses import replace

from corgi_io.schedule import BlockTable, EpochSpec, epoch_plans, imbalance, piece_counts, simulate, split_workers
from corgi_io.schedule.epoch import loader_planner
from corgi_io.schedule.run_model import PieceBytes, RunModel, predict_run
from corgi_io.schedule.shuffle_quality import shuffle_quality
from corgi_io.schedule.stream import buffer_plan
from corgi_io.arguments import check_at_least
from corgi_io.report.stats import counted, short_number


def check_options(*, world_size: int, workers: int, batch_size, buffer_blocks: int, epoch: int, seed: int) -> None:
    """ArgumentError (a ValueError) naming the first option below its least value (batch size None: "not given")."""
    for name, value, least in (("world size", world_size, 1), ("workers", workers, 0), ("batch size", batch_size, 1),
                               ("buffer blocks", buffer_blocks, 1), ("epoch", epoch, 0), ("seed", seed, 0)):
        check_at_least(name, value, least, optional=name == "batch size")


def summarize(block_first, block_count, sizes, world_size: int, *, workers: int = 0, balance: str = "count",
              batch_size: int | None = None, epoch: int = 0, seed: int = 0, drop_last: bool = False,
              buffer_blocks: int = 16) -> dict:
    """Per-rank samples, size sums, shares and ranged reads of one epoch's plan and, with
    ``batch_size``, the per-step imbalance and simulated epoch time of the plans in `_step_plans`."""
    check_options(world_size=world_size, workers=workers, batch_size=batch_size, buffer_blocks=buffer_blocks,
                  epoch=epoch, seed=seed)
    table = BlockTable.from_sizes(block_first, block_count, sizes)
    spec = EpochSpec(world_size, seed=seed, epoch=epoch, balance=balance, drop_last=drop_last, num_workers=workers,
                     buffer_pieces=buffer_blocks)
    plans = epoch_plans(table, spec)
    rank_size = np.array([int(table.sizes_of(p).sum()) for p in plans], np.int64)
    n, samples = spec.samples_per_rank(table.num_samples), table.num_samples
    total = int(rank_size.sum())
    ranks = [{"rank": r, "samples": int(piece_counts(p).sum()), "size": int(rank_size[r]), "share": float(rank_size[r] / total) if total else 0.0,
              "pieces": sum(len(w) for w in split_workers(p, workers))} for r, p in enumerate(plans)]
    count_plans = plans if balance == "count" else epoch_plans(table, replace(spec, balance="count"))
    summary = {
        "samples": samples, "blocks": len(table.count), "world_size": world_size, "workers": workers,
        "balance": balance, "seed": seed, "epoch": epoch, "drop_last": drop_last,
        "samples_per_rank": n, "padding": max(world_size * n - samples, 0),
        "dropped": max(samples - world_size * n, 0), "size_total": int(table.size_sum.sum()), "size_read": total,
        "ranks": ranks, "size_imbalance": imbalance(rank_size),
        "count_size_imbalance": imbalance([table.sizes_of(p).sum() for p in count_plans]),
    }
    summary["shuffle"] = rank_shuffle_quality(table, spec, plans[0])
    if batch_size:
        summary["steps"] = _steps(table, spec, batch_size)
    return summary


def rank_shuffle_quality(table: BlockTable, spec: EpochSpec, pieces: np.ndarray) -> dict:
    """`shuffle_quality` of the order rank 0 yields its samples in (one worker's stream over all its pieces), with
    `buffer_blocks` as the plan has it: what a user trades buffer memory against.  O(samples of the rank)."""
    order = [ids for _, ids in buffer_plan(pieces, sizes=table.sizes, **spec.stream(0, 0))]
    quality = shuffle_quality(np.concatenate(order) if order else np.zeros(0, np.int64), table.first,
                              table.num_samples, spec.seed)
    return {"buffer_blocks": spec.buffer_pieces, **quality}


def _step_plans(balance: str) -> list[tuple[str, str, bool]]:
    """(name, balance, balanced batches): the count baseline, then the chosen balance without and with
    size-balanced batches."""
    plans = [("count", "count", False)] + ([(balance, balance, False)] if balance != "count" else [])
    return plans + [(f"{balance} + batches", balance, True)]


def _steps(table: BlockTable, spec: EpochSpec, batch_size: int) -> dict:
    """One `simulate` per step plan; speed-ups relative to the first (count, plain shuffle)."""
    rows, baseline, steps = [], None, 0
    for name, mode, batched in _step_plans(spec.balance):
        sim = simulate(table, replace(spec, balance=mode, batch_size=batch_size if batched else None),
                       batch_size=batch_size)
        baseline = sim["epoch_time"] if baseline is None else baseline
        steps = len(sim["step_size"])
        rows.append({"plan": name, "balance": mode, "balanced_batches": batched, **sim["step_imbalance"],
                     "epoch_time": sim["epoch_time"],
                     "speedup": baseline / sim["epoch_time"] if sim["epoch_time"] else 1.0})
    return {"batch_size": batch_size, "num_steps": steps, "plans": rows}


def render(summary: dict) -> str:
    """Terminal text: a header, the per-rank table, the imbalance and, with batches, the step table."""
    s = summary
    extra = f", {s['padding']:,} padding" if s["padding"] else (f", {s['dropped']:,} dropped" if s["dropped"] else "")
    lines = [f"{counted(s['samples'], 'sample')} in {counted(s['blocks'], 'block')}; "
             f"world size {s['world_size']}, {counted(s['workers'], 'worker')} per rank, balance={s['balance']}, "
             f"seed {s['seed']}, epoch {s['epoch']}",
             f"each rank reads {counted(s['samples_per_rank'], 'sample')}{extra}", "",
             f"{'rank':>6}{'samples':>12}{'size sum':>18}{'share':>9}{'pieces':>9}"]
    for r in s["ranks"]:
        lines.append(f"{r['rank']:>6}{r['samples']:>12,}{r['size']:>18,}{r['share']:>9.2%}{r['pieces']:>9,}")
    lines += ["", f"size sum max/mean {s['size_imbalance']:.4f} (count balance: {s['count_size_imbalance']:.4f})"]
    q = s["shuffle"]
    lines += [f"shuffle quality of rank 0 (gap entropy of its samples + their blocks, MosaicML's measure): "
              f"{q['total']:.2f} bits, {q['ratio']:.2f} of a full shuffle's {q['full_shuffle']:.2f} "
              f"(--buffer-blocks {q['buffer_blocks']})"]
    if "steps" in s:
        st = s["steps"]
        lines += ["", f"{counted(st['num_steps'], 'step')} of {counted(st['batch_size'], 'sample')} per rank; "
                      "step imbalance: max / mean over ranks of a step's batch size sums;",
                  "epoch time: sum over steps of the slowest rank's batch size sum (time ~ size)",
                  f"{'plan':<18}{'p50':>8}{'p95':>8}{'max':>8}{'epoch time':>16}{'vs count':>10}"]
        for p in st["plans"]:
            lines.append(f"{p['plan']:<18}{p['p50']:>8.3f}{p['p95']:>8.3f}{p['max']:>8.3f}"
                         f"{p['epoch_time']:>16,.0f}{p['speedup']:>9.2f}x")
    return "\n".join(lines)


def price_run(blocks, samples, model: RunModel, *, world_size: int, workers: int = 0, balance: str = "count",
              batch_size: int | None = None, epoch: int = 0, epochs: int = 1, seed: int = 0, drop_last: bool = False,
              buffer_blocks: int = 16) -> dict:
    """`predict_run` of a pack whose manifest has the columns `blocks` (first, count, length) and `samples` (size,
    offset, length), read by a CorgiPile loader with these options (`Batches(batch_size)`, `Shuffle(buffer_blocks=)`,
    ...) for `epochs` epochs from `epoch`: each epoch's planner is the loader's own (`loader_planner`)."""
    check_options(world_size=world_size, workers=workers, batch_size=batch_size, buffer_blocks=buffer_blocks,
                  epoch=epoch, seed=seed)
    table = BlockTable.from_sizes(blocks.first, blocks.count, samples.size)

    def planner_of(e: int):
        return loader_planner(table, world_size, e, shuffle="corgipile", buffer_blocks=buffer_blocks, seed=seed,
                              balance=balance, drop_last=drop_last, batch_size=batch_size)

    piece_bytes = PieceBytes(blocks.first, blocks.count, blocks.length, samples.offset, samples.length)
    return predict_run(planner_of, piece_bytes, model, workers=workers, epochs=epochs, first_epoch=epoch)


def render_run(run: dict) -> str:
    """Terminal text of `price_run`: the model in one line, one line per epoch, the memory bound."""
    m = run["model"]
    link = "no bandwidth limit" if m["bandwidth"] is None else f"{short_number(m['bandwidth'])}B/s"
    cache = f", cache {short_number(m['cache_bytes'])}B ({m['cache_policy']})" if m["cache_bytes"] else ", no cache"
    start = f", workers start in {m['start'] * 1e3:g} ms" if m["start"] else ""
    lines = [f"simulated run: {link}, {m['latency'] * 1e3:g} ms to first byte, {m['in_flight']} reads in flight "
             f"per worker, decode {m['decode'] * 1e3:g} ms per sample{cache}{start}",
             f"{'epoch':>6}{'wall time':>12}{'slowest rank':>14}{'decode':>10}{'remote bytes':>14}{'hit rate':>10}"]
    for e in run["epochs"]:
        hits = "-" if e["hit_rate"] is None else f"{e['hit_rate']:.0%}"
        lines.append(f"{e['epoch']:>6}{e['wall_time']:>10.2f} s{e['slowest_rank']:>14}{e['decode_time']:>8.2f} s"
                     f"{short_number(e['remote_bytes']) + 'B':>14}{hits:>10}")
    lines.append(f"memory bound (buffer + read-ahead): {short_number(run['memory']['worker'])}B per worker, "
                 f"{short_number(run['memory']['rank'])}B per rank")
    return "\n".join(lines)

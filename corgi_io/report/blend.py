"""What `corgi plan A B --weights 0.7,0.3` shows: how one epoch of a weighted blend draws on each pack.

Per source: its samples, its quota of the epoch, the passes over it that the quota takes (a pass
reads every sample once; more than 1: the source repeats, less: the next epoch continues it),
the share of the epoch's samples and of its size sum.  Computed by `corgi_io.schedule.blend`
from the manifests' block and size columns; nothing is read from the shards.
"""
from __future__ import annotations

import numpy as np

from corgi_io.arguments import check_at_least
from corgi_io.report.stats import counted
from corgi_io.schedule.blend import BlendEpoch, check_weights, epoch_quotas
from corgi_io.schedule.spec import BlockTable


def summarize_blend(names, tables, weights, *, samples_per_epoch: int | None = None, world_size: int = 1,
                    epoch: int = 0, seed: int = 0) -> dict:
    """JSON-ready data on one epoch of the blend of `tables` (BlockTables with `sizes`), named `names`.

    `samples_per_epoch` defaults to the sources' samples together (one pass's worth of the blend); each of
    `world_size` ranks takes a source's quota divided by it (rounded up: padding evens the ranks)."""
    check_at_least("world size", world_size, 1, optional=False)
    weights = check_weights(names, weights)
    total = sum(table.num_samples for table in tables)
    samples_per_epoch = total if samples_per_epoch is None else int(samples_per_epoch)
    quotas = epoch_quotas(weights, samples_per_epoch)
    blend = BlendEpoch.of(tables, quotas, seed, epoch)
    size_taken = np.bincount(blend.source, weights=blend.table.size_sum, minlength=len(tables)) \
        if len(blend.runs) else np.zeros(len(tables))
    size_total = max(size_taken.sum(), 1.0)
    rows = [{"source": name, "weight": float(w), "samples": table.num_samples, "quota": int(q),
             "per_rank": -(-int(q) // world_size),
             "passes": float(q / max(table.num_samples, 1)), "share": float(q / max(samples_per_epoch, 1)),
             "size_share": float(size / size_total)}
            for name, w, table, q, size in zip(names, weights, tables, quotas, size_taken)]
    return {"samples_per_epoch": samples_per_epoch, "world_size": world_size, "epoch": epoch, "seed": seed,
            "sources": rows}


def tables_of(manifests) -> list:
    """The BlockTables (with per-sample sizes) of open manifests, for `summarize_blend`."""
    return [BlockTable.from_sizes(m.blocks.first, m.blocks.count, np.asarray(m.samples.size)) for m in manifests]


def render_blend(summary: dict) -> str:
    """Terminal text: a header, then one row per source."""
    lines = [f"blend of {counted(len(summary['sources']), 'source')}: "
             f"{counted(summary['samples_per_epoch'], 'sample')} per epoch, world size {summary['world_size']}, "
             f"seed {summary['seed']}, epoch {summary['epoch']}", "",
             f"{'source':<24}{'weight':>8}{'samples':>12}{'per epoch':>12}{'per rank':>10}{'passes':>9}{'share':>9}"
             f"{'size share':>12}"]
    for r in summary["sources"]:
        lines.append(f"{r['source'][:23]:<24}{r['weight']:>8.3f}{r['samples']:>12,}{r['quota']:>12,}"
                     f"{r['per_rank']:>10,}{r['passes']:>9.3f}{r['share']:>9.2%}{r['size_share']:>12.2%}")
    return "\n".join(lines)

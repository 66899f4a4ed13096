"""Summaries of a pack for people and programs: counts, size distributions, block and shard balance.

`summarize` returns plain JSON-ready data; `render` turns it into terminal text with a
log-binned histogram; `plot` draws the same histogram to a PNG through matplotlib.
"""
from __future__ import annotations

import numpy as np

from corgi_io.manifest import KINDS, Manifest

HISTOGRAM_BINS = 16
BAR_WIDTH = 40


def describe(values) -> dict:
    """min, p50, p90, p99, max, mean and coefficient of variation of a 1-D array."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return {"count": 0}
    mean = float(values.mean())
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"count": int(len(values)), "min": _number(values.min()), "p50": _number(p50), "p90": _number(p90),
            "p99": _number(p99), "max": _number(values.max()), "mean": round(mean, 3),
            "cv": round(float(values.std() / mean), 4) if mean else 0.0}


def _number(x):
    return int(x) if float(x).is_integer() else round(float(x), 3)


def log_histogram(values, bins: int = HISTOGRAM_BINS) -> dict:
    """Counts over logarithmic bins (sizes span orders of magnitude); zeros get their own bin."""
    values = np.asarray(values, dtype=np.float64)
    positive = values[values > 0]
    zeros = int((values <= 0).sum())
    if not len(positive):
        return {"edges": [], "counts": [], "zeros": zeros}
    lo, hi = positive.min(), positive.max()
    edges = np.geomspace(lo, hi * 1.000001, bins + 1) if hi > lo else np.array([lo, lo + 1.0])
    counts, _ = np.histogram(positive, bins=edges)
    return {"edges": [round(float(e), 3) for e in edges], "counts": counts.tolist(), "zeros": zeros}


def summarize(m: Manifest) -> dict:
    """Everything `corgi stats` shows, as JSON-ready data."""
    m.validate_rows()  # stats read every row: check them all (opening a pack checks only its tables)
    s, b = m.samples, m.blocks
    per_kind = {KINDS[k]: describe(s.size[s.kind == k]) for k in np.unique(s.kind)}
    shard_bytes = [sh.bytes for sh in m.shards]
    return {
        "format": m.format,
        "samples": m.num_samples,
        "shards": len(m.shards),
        "blocks": len(b),
        "bytes": int(sum(shard_bytes)),
        "payload_bytes": int(s.bytes.sum()),
        "skipped": len(m.skipped),
        "labels": len(m.labels),
        "size": describe(s.size),
        "size_by_kind": per_kind,
        "size_histogram": log_histogram(s.size),
        "block_samples": describe(b.count),
        "block_bytes": describe(b.length),
        "block_size_sum": describe(b.size_sum),
        "shard_bytes": describe(shard_bytes),
        "shard_samples": describe([sh.samples for sh in m.shards]),
    }


def counted(n: int, noun: str) -> str:
    """'1 block', '36 blocks', '1,000 samples'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def render(summary: dict) -> str:
    """Terminal text: counts, size tables, a histogram of sizes on log bins, block and shard balance."""
    lines = [f"{counted(summary['samples'], 'sample')} in {counted(summary['blocks'], 'block')} and "
             f"{counted(summary['shards'], summary['format'] + ' shard')}, {_human(summary['bytes'])} "
             f"({counted(summary['labels'], 'label')}, {counted(summary['skipped'], 'file')} skipped)", ""]
    header = f"{'':16}{'min':>12}{'p50':>12}{'p90':>12}{'p99':>12}{'max':>12}{'mean':>12}{'cv':>8}"
    lines.append(header)
    rows = [(f"size ({kind})", d) for kind, d in summary["size_by_kind"].items()]
    rows += [("size (all)", summary["size"]), ("block samples", summary["block_samples"]),
             ("block bytes", summary["block_bytes"]), ("block size", summary["block_size_sum"]),
             ("shard bytes", summary["shard_bytes"])]
    for name, d in rows:
        if d.get("count"):
            lines.append(f"{name:16}" + "".join(f"{_short(d[k]):>12}" for k in ("min", "p50", "p90", "p99", "max", "mean"))
                         + f"{d['cv']:>8.3f}")
    histogram = summary["size_histogram"]
    if histogram["counts"]:
        lines += ["", "size histogram (log bins)"]
        peak = max(max(histogram["counts"]), histogram["zeros"], 1)
        if histogram["zeros"]:
            lines.append(f"{'0':>23} {'#' * round(BAR_WIDTH * histogram['zeros'] / peak):<{BAR_WIDTH}} {histogram['zeros']}")
        edges = histogram["edges"]
        for lo, hi, count in zip(edges[:-1], edges[1:], histogram["counts"]):
            lines.append(f"{_short(lo):>10} - {_short(hi):>10} {'#' * round(BAR_WIDTH * count / peak):<{BAR_WIDTH}} {count}")
    return "\n".join(lines)


def _short(x) -> str:
    x = float(x)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.4g}"


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def plot(m: Manifest, path) -> None:
    """Write a PNG with the size histogram per kind (log x axis) and the per-block size sums."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'corgi-io[plot]'") from None
    s = m.samples
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    positive = s.size[s.size > 0]
    edges = np.geomspace(max(positive.min(), 1), positive.max() * 1.000001, 40) if len(positive) else 10
    for k in np.unique(s.kind):
        left.hist(s.size[(s.kind == k) & (s.size > 0)], bins=edges, alpha=0.6, label=KINDS[k])
    left.set(xscale="log", xlabel="sample size (pixels / frames / tokens)", ylabel="samples",
             title=f"{m.num_samples:,} samples")
    left.legend()
    right.bar(np.arange(len(m.blocks)), m.blocks.size_sum, width=1.0)
    right.set(xlabel="block", ylabel="size sum", title=f"{len(m.blocks):,} blocks in {len(m.shards)} shards")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

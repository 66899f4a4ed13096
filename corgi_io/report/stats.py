"""Summaries of a pack for people and programs: counts, size distributions, block and shard balance.

`summarize` returns plain JSON-ready data; `render` turns it into terminal text with a
log-binned histogram (`corgi_io.report.plot` draws it to a PNG).
"""
from __future__ import annotations

import numpy as np

from corgi_io.manifest import DUPLICATE_REASON, KINDS, Manifest

HISTOGRAM_BINS = 16
BAR_WIDTH = 40
COLUMN_WIDTH = 10
STATISTICS = ("min", "p50", "p90", "p99", "max", "mean")


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
        "skipped": m.skips["count"],  # the head's summary: the records themselves are not read
        "duplicates": m.skips["reasons"].get(DUPLICATE_REASON, 0),
        "skip_reasons": m.skips["reasons"],  # the head's most frequent reasons, with their counts
        "labels": len(m.labels),
        "fields": dict(zip(m.fields, m.field_counts())),  # field name -> samples holding it
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
             f"({counted(summary['labels'], 'label')}, {counted(summary['skipped'], 'file')} skipped"
             + (f", of which {counted(summary['duplicates'], 'duplicate')} removed by --dedup)"
                if summary["duplicates"] else ")"),
             "fields: " + ", ".join(f"{name} ({count:,})" for name, count in summary["fields"].items()), ""]
    return "\n".join(lines + _distribution_table(summary) + _histogram_lines(summary["size_histogram"]))


def _distribution_table(summary: dict) -> list[str]:
    rows = [(f"size ({kind})", d) for kind, d in summary["size_by_kind"].items()]
    rows += [("size (all)", summary["size"]), ("block samples", summary["block_samples"]),
             ("block bytes", summary["block_bytes"]),
             ("block size sum (pixels/frames/tokens)", summary["block_size_sum"]),
             ("shard bytes", summary["shard_bytes"])]
    rows = [(name, d) for name, d in rows if d.get("count")]
    width = max((len(name) for name, _ in rows), default=0) + 2
    lines = [f"{'':{width}}" + "".join(f"{k:>{COLUMN_WIDTH}}" for k in STATISTICS) + f"{'cv':>8}"]
    for name, d in rows:
        lines.append(f"{name:{width}}" + "".join(f"{short_number(d[k]):>{COLUMN_WIDTH}}" for k in STATISTICS)
                     + f"{d['cv']:>8.3f}")
    return lines


def _histogram_lines(histogram: dict) -> list[str]:
    if not histogram["counts"]:
        return []
    lines = ["", "size histogram (log bins)"]
    peak = max(max(histogram["counts"]), histogram["zeros"], 1)
    bar = lambda count: f"{'#' * round(BAR_WIDTH * count / peak):<{BAR_WIDTH}} {count}"  # noqa: E731
    if histogram["zeros"]:
        lines.append(f"{'0':>23} {bar(histogram['zeros'])}")
    edges = histogram["edges"]
    for lo, hi, count in zip(edges[:-1], edges[1:], histogram["counts"]):
        lines.append(f"{short_number(lo):>10} - {short_number(hi):>10} {bar(count)}")
    return lines


def short_number(x) -> str:
    """1234 -> '1.23k', 5e6 -> '5M', 0.5 -> '0.5': three significant digits and an SI suffix."""
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

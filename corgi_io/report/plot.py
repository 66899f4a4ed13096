"""`corgi stats --plot`: the size histogram per kind and the block size sums, drawn to a PNG.

Everything is counted with numpy first and drawn as a few dozen patches, so the figure takes
about as long at 10^7 samples as at 10^3: up to `MAX_BLOCK_BARS` blocks get a bar each (the
order along the pack shows); above that, the blocks' size sums are drawn as a histogram.
Count axes get integer ticks; the log size axis labels 1-2-5 steps (fewer over wide ranges)
and no minor ticks, so labels never overlap.
"""
from __future__ import annotations

import numpy as np

from corgi_io.manifest import KINDS, Manifest
from corgi_io.report.stats import counted, short_number

SIZE_BINS = 40
MAX_BLOCK_BARS = 200
MIN_SPAN = 3.0       # a log axis shows at least this factor, so one 1-2-5 tick always lies inside


def plot(m: Manifest, path) -> None:
    """Write `size_figure(m)` to the PNG `path`."""
    size_figure(m).savefig(path, dpi=100)


def size_figure(m: Manifest):
    """A matplotlib Figure: the size histogram per kind (log x axis) and the block size sums."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'corgi-io[plot]'") from None
    fig = Figure(figsize=(11, 4), layout="tight")
    left, right = fig.subplots(1, 2)
    _size_histogram(left, m)
    _block_sums(right, m)
    return fig


def _size_histogram(ax, m: Manifest) -> None:
    sizes, kinds = np.asarray(m.samples.size), np.asarray(m.samples.kind)
    positive = sizes > 0
    if positive.any():
        lo, hi = max(int(sizes[positive].min()), 1), int(sizes[positive].max())
        edges = np.geomspace(lo, hi * 1.000001, SIZE_BINS + 1) if hi > lo else np.array([lo / 1.1, lo * 1.1])
        for k in np.unique(kinds[positive]):
            counts, _ = np.histogram(sizes[positive & (kinds == k)], bins=edges)
            ax.stairs(counts, edges, fill=True, alpha=0.6, label=KINDS[k])
        _log_size_axis(ax.xaxis, edges[0], edges[-1])
        ax.legend()
    ax.set(xlabel="sample size (pixels / frames / tokens)", ylabel="samples",
           title=counted(m.num_samples, "sample"))
    _integer_ticks(ax.yaxis)


def _block_sums(ax, m: Manifest) -> None:
    size_sum = np.asarray(m.blocks.size_sum)
    title = f"{counted(len(size_sum), 'block')} in {counted(len(m.shards), 'shard')}"
    if len(size_sum) <= MAX_BLOCK_BARS:
        ax.bar(np.arange(len(size_sum)), size_sum, width=1.0)
        ax.set(xlabel="block", ylabel="block size sum", title=title)
        _integer_ticks(ax.xaxis)
        _short_labels(ax.yaxis)
        return
    counts, edges = np.histogram(size_sum, bins=SIZE_BINS)
    ax.stairs(counts, edges, fill=True)
    ax.set(xlabel="block size sum (pixels / frames / tokens)", ylabel="blocks", title=title)
    _integer_ticks(ax.yaxis)
    _short_labels(ax.xaxis)


def _integer_ticks(axis) -> None:
    """Whole-number ticks (no 2.5 samples) with short labels ("150k", no "1e6" offset).

    `min_n_ticks=1`: a view holding a single whole number (one block, -0.5 to 0.5) ticks that
    number alone; the default of 2 makes MaxNLocator fall back to fractions such as -0.45.
    """
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    _short_labels(axis)


def _short_labels(axis) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda x, _: short_number(x)))


def _log_size_axis(axis, lo: float, hi: float) -> None:
    """Log scale with 1-2-5 ticks (decades only past 3 decades), short labels ("20k"), no minor labels."""
    from matplotlib.ticker import LogLocator, NullFormatter

    pad = max(MIN_SPAN / (hi / lo), 1.0) ** 0.5
    axis.axes.set_xscale("log")
    axis.axes.set_xlim(lo / pad, hi * pad)
    subs = (1.0, 2.0, 5.0) if hi / lo <= 1e3 else (1.0,)
    axis.set_major_locator(LogLocator(subs=subs, numticks=8))
    axis.set_minor_formatter(NullFormatter())
    _short_labels(axis)

"""What `corgi stats` shows people: wording, plurals, --help pointing at verify, and a figure with
readable axes that stays cheap at many blocks."""
from __future__ import annotations

import io
import json
import math

import pytest

from corgi_io.manifest import open_manifest
from corgi_io.report.stats import render, summarize
from corgi_io.report.plot import MAX_BLOCK_BARS, _integer_ticks, _log_size_axis, size_figure
from helpers.corpus_factory import write_text
from helpers.packs import synthetic_pack

matplotlib_figure = pytest.importorskip("matplotlib.figure", reason="pip install 'corgi-io[plot]'")


@pytest.fixture(scope="module")
def one_block_pack(tmp_path_factory, corgi):
    root = tmp_path_factory.mktemp("one")
    write_text(root / "src" / "a" / "only.txt", 3)
    result = corgi("pack", root / "src", root / "out", "--workers", "1")
    assert result.exit_code == 0, result.output
    return root / "out"


def test_render_says_block_size_sum_and_uses_singulars(one_block_pack):
    text = render(summarize(open_manifest(one_block_pack)))
    assert text.startswith("1 sample in 1 block and 1 wds shard,"), text
    assert "(1 label, 0 files skipped)" in text
    assert "block size sum (pixels/frames/tokens)" in text


def test_stats_help_points_at_verify(corgi):
    result = corgi("stats", "--help")
    assert result.exit_code == 0
    assert "corgi verify" in result.stdout and "no shard is read" in result.stdout


def drawn(fig):
    fig.savefig(io.BytesIO(), format="png")
    return fig


def visible_labels(axis):
    view = sorted(axis.get_view_interval())
    return [label for tick, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
            if view[0] <= tick <= view[1] and label.get_text()] + \
           [label for label in axis.get_minorticklabels() if label.get_text()]


@pytest.mark.parametrize("lo, hi", [(1000, 1500), (4096, 65536), (1, 1e9), (5, 5.5), (30, 5000)])
def test_log_size_axis_labels_never_overlap_and_at_least_one_shows(lo, hi):
    fig = matplotlib_figure.Figure(figsize=(5.5, 4))
    ax = fig.add_subplot()
    ax.stairs([3, 1], [lo, math.sqrt(lo * hi), hi], fill=True)
    _log_size_axis(ax.xaxis, lo, hi)
    labels = visible_labels(drawn(fig).axes[0].xaxis)
    assert labels, (lo, hi)
    boxes = sorted((label.get_window_extent() for label in labels), key=lambda box: box.x0)
    for a, b in zip(boxes, boxes[1:]):
        assert a.x1 <= b.x0, [label.get_text() for label in labels]


@pytest.mark.parametrize("counts", [[1, 2, 3], [0, 1], [7, 2, 5, 1]])
def test_count_axes_tick_only_whole_numbers(counts):
    fig = matplotlib_figure.Figure()
    ax = fig.add_subplot()
    ax.stairs(counts, range(len(counts) + 1), fill=True)
    _integer_ticks(ax.yaxis)
    drawn(fig)
    low, high = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if low <= t <= high]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


def test_figure_of_few_blocks_draws_a_bar_per_block(one_block_pack):
    fig = drawn(size_figure(open_manifest(one_block_pack)))
    right = fig.axes[1]
    assert right.get_title() == "1 block in 1 shard"
    assert len(right.patches) == 1


def test_figure_of_many_blocks_draws_a_histogram_of_block_sums(tmp_path):
    synthetic_pack(tmp_path, 64 * (MAX_BLOCK_BARS + 50))
    m = open_manifest(tmp_path)
    fig = drawn(size_figure(m))
    left, right = fig.axes
    assert right.get_ylabel() == "blocks" and len(right.patches) == 1
    values, edges, _ = right.patches[0].get_data()
    assert values.sum() == len(m.blocks)
    assert edges[0] <= m.blocks.size_sum.min() and edges[-1] >= m.blocks.size_sum.max()
    (sample_counts, _, _), = [patch.get_data() for patch in left.patches]
    assert sample_counts.sum() == m.num_samples


def test_one_block_axis_ticks_the_block_number_alone(one_block_pack):
    right = drawn(size_figure(open_manifest(one_block_pack))).axes[1]
    low, high = right.get_xlim()
    assert [t for t in right.get_xticks() if low <= t <= high] == [0], right.get_xticks()


@pytest.mark.parametrize("as_json", [False, True])
def test_stats_plot_says_where_it_wrote_the_figure(one_block_pack, corgi, tmp_path, as_json):
    png = tmp_path / "sizes.png"
    result = corgi("stats", one_block_pack, "--plot", png, *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    line = f"wrote the size histogram and block size sums to {png}"
    assert line in (result.stderr if as_json else result.stdout.splitlines()[-1])
    if as_json:
        json.loads(result.stdout)  # the line does not spoil the JSON
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

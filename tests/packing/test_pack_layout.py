"""Layout: greedy block and shard cuts (property tests), and the limits as they come out of a real pack."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.packing.layout import greedy_cuts, plan_layout
from corgi_io.manifest import open_manifest

sizes = st.lists(st.integers(min_value=0, max_value=5000), max_size=200)


def groups(starts, n):
    bounds = list(starts) + [n]
    return [(bounds[i], bounds[i + 1]) for i in range(len(starts))]


@settings(max_examples=300, deadline=None)
@given(items=sizes, max_bytes=st.integers(1, 20000), max_items=st.one_of(st.none(), st.integers(1, 50)))
def test_greedy_cuts_properties(items, max_bytes, max_items):
    items = np.array(items, dtype=np.int64)
    starts = greedy_cuts(items, max_bytes, max_items)
    n = len(items)
    if n == 0:
        assert len(starts) == 0
        return
    assert starts[0] == 0 and np.all(np.diff(starts) > 0) and starts[-1] < n  # every item in exactly one group
    for a, b in groups(starts, n):
        total = int(items[a:b].sum())
        assert total <= max_bytes or b - a == 1  # within the byte limit unless a single item is bigger
        if max_items:
            assert b - a <= max_items
        if b < n:  # greedy: the next item would break a limit
            assert total + items[b] > max_bytes or (max_items and b - a == max_items)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.integers(1, 5000), max_size=200), block_bytes=st.integers(1, 20000),
       block_samples=st.integers(1, 40), shard_bytes=st.integers(1, 60000))
def test_plan_layout_properties(records, block_bytes, block_samples, shard_bytes):
    records = np.array(records, dtype=np.int64)
    n = len(records)
    plan = plan_layout(records, block_bytes, block_samples, shard_bytes)
    blocks = groups(plan.block_starts, n)
    assert [i for a, b in blocks for i in range(a, b)] == list(range(n))
    for a, b in blocks:
        assert b - a <= block_samples
        assert records[a:b].sum() <= block_bytes or b - a == 1
    block_total = [int(records[a:b].sum()) for a, b in blocks]
    shards = groups(plan.shard_starts, len(blocks))
    assert [i for a, b in shards for i in range(a, b)] == list(range(len(blocks)))
    for a, b in shards:
        assert sum(block_total[a:b]) <= shard_bytes or b - a == 1
    # shard sample ranges are cut on block boundaries and tile the samples
    bounds = plan.block_bounds(n)[plan.shard_bounds()]
    ranges = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
    assert len(ranges) == len(shards)
    assert [i for a, b in ranges for i in range(a, b)] == list(range(n))
    block_starts = set(plan.block_starts.tolist())
    assert all(a in block_starts for a, _ in ranges)


def test_plan_layout_single_oversized_sample_gets_its_own_block_and_shard():
    plan = plan_layout(np.array([10, 1000, 10, 10]), block_bytes=100, block_samples=10, shard_bytes=100)
    assert plan.block_starts.tolist() == [0, 1, 2]
    assert plan.shard_starts.tolist() == [0, 1, 2]
    assert plan.block_bounds(4)[plan.shard_bounds()].tolist() == [0, 1, 2, 4]


def test_plan_layout_empty():
    plan = plan_layout(np.zeros(0, dtype=np.int64))
    assert len(plan.block_starts) == 0 and len(plan.shard_starts) == 0


# --- limits in a real pack ----------------------------------------------------------------------

def check_limits(out, block_bytes, block_samples, shard_bytes):
    m = open_manifest(out)
    b = m.blocks
    for i in range(len(b)):
        assert b.count[i] <= block_samples
        assert b.length[i] <= block_bytes or b.count[i] == 1, f"block {i}: {b.length[i]} bytes > {block_bytes}"
    for k, shard in enumerate(m.shards):
        n_blocks = int((b.shard == k).sum())
        assert shard.bytes <= shard_bytes or n_blocks == 1, f"{shard.path}: {shard.bytes} bytes > {shard_bytes}"


@pytest.mark.parametrize("args", [("16k", 4, "64k"), ("8k", 100, "30k"), ("1m", 2, "20k")])
def test_tfrecord_pack_respects_block_and_shard_limits(mixed_corpus, corgi, tmp_path, args):
    root, _ = mixed_corpus
    block_bytes, block_samples, shard_bytes = args
    out = tmp_path / "out"
    result = corgi("pack", root, out, "--format", "tfrecord", "--workers", "1", "--block-bytes", block_bytes,
                   "--block-samples", block_samples, "--shard-bytes", shard_bytes)
    assert result.exit_code == 0, result.output
    to_int = {"k": 1 << 10, "m": 1 << 20}
    check_limits(out, int(block_bytes[:-1]) * to_int[block_bytes[-1]], block_samples,
                 int(shard_bytes[:-1]) * to_int[shard_bytes[-1]])


def _exact_text(path, nbytes):
    """UTF-8 text of exactly `nbytes` bytes (words of 'ab ')."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((b"ab " * nbytes)[:nbytes - 1] + b"\n")


def test_wds_shard_bytes_bound_includes_the_end_of_archive_trailer(tmp_path, corgi):
    # each sample: 512 header + 512 data + 1024 for the .cls member = 2048 bytes, estimated exactly
    for i in range(8):
        _exact_text(tmp_path / "src" / "c" / f"{i}.txt", 512)
    out = tmp_path / "out"
    assert corgi("pack", tmp_path / "src", out, "--workers", "1", "--block-samples", "1",
                 "--shard-bytes", "8192").exit_code == 0
    check_limits(out, 4 << 20, 1, 8192)


def _long_dir(tag: str) -> str:
    return "/".join(f"{tag}{i}" * 100 for i in range(3))  # 602 bytes: pax header data over one tar block


@pytest.mark.parametrize("name, block_bytes", [
    (lambda i: f"fête_{i}.txt", 4096),                   # unicode: still plain ustar
    (lambda i: f"{_long_dir('d')}/f{i}.txt", 8192),      # over 100 bytes: a pax header per member
], ids=["unicode", "very-long"])
def test_wds_block_bytes_bound_with_unusual_names(tmp_path, corgi, name, block_bytes):
    for i in range(6):
        _exact_text(tmp_path / "src" / "c" / name(i), 512)
    out = tmp_path / "out"
    assert corgi("pack", tmp_path / "src", out, "--workers", "1", "--block-bytes", str(block_bytes)).exit_code == 0
    check_limits(out, block_bytes, 1024, 512 << 20)


def test_wds_ascii_blocks_respect_block_bytes(tmp_path, corgi):
    for i in range(6):
        _exact_text(tmp_path / "src" / "c" / f"plain_{i}.txt", 512)
    out = tmp_path / "out"
    assert corgi("pack", tmp_path / "src", out, "--workers", "1", "--block-bytes", "4096").exit_code == 0
    check_limits(out, 4096, 1024, 512 << 20)
    assert open_manifest(out).blocks.count.tolist() == [2, 2, 2]

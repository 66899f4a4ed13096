"""Balance that helps by default: size balance comes with balanced batches and then never loses to
count balance per step; samples larger than a balanced batch are placed in steps every rank shares."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from corgi_io.schedule import BlockTable, EpochSpec, simulate
from corgi_io.schedule import piece_samples
from corgi_io.schedule.batches import HEAVY_EVERY, BatchComposer, heavy_slot
from corgi_io.schedule.stream import even_buffers

BENCH = Path(__file__).parents[2] / "bench" / "balance.py"


def bench_module():
    """bench/balance.py, for the size distributions it reports on."""
    spec = importlib.util.spec_from_file_location("balance_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_table(name: str, samples: int, seed: int = 0) -> BlockTable:
    bench = bench_module()
    sizes = {"video": bench.video_frames, "text": bench.text_tokens}[name](samples, np.random.default_rng(seed))
    return BlockTable.from_sizes(*bench.synthetic(sizes, 64))


@pytest.mark.parametrize("name", ["video", "text"])
@pytest.mark.parametrize("world, workers", [(8, 1), (64, 1), (16, 3)])
def test_size_balance_with_batches_never_slower_than_count(name, world, workers):
    table = bench_table(name, 40_000, seed=world)  # the bench's batches (32) and buffers (16 blocks)
    plain = simulate(table, EpochSpec(world, seed=3, num_workers=workers), batch_size=32)
    sized = simulate(table, EpochSpec(world, seed=3, num_workers=workers, balance="size", batch_size=32))
    # synchronous time ~ size: below count with the same balanced batches, and below plain count
    assert sized["epoch_time"] <= sized["count_epoch_time"] <= plain["epoch_time"]
    assert sized["step_imbalance"]["p95"] <= plain["step_imbalance"]["p95"]


@pytest.mark.slow
def test_video_step_p95_at_64_ranks():
    res = simulate(bench_table("video", 200_000), EpochSpec(64, balance="size", batch_size=32))
    assert res["step_imbalance"]["p95"] <= 1.10
    assert res["speedup"] >= 1.0


def compose(sizes, chunks, batch_size, target, seed):
    """A worker's yield order, buffer by buffer (``chunks``: the ids read per buffer)."""
    composer = BatchComposer(sizes, batch_size, target)
    return [composer.compose(np.asarray(ids, np.int64), np.random.default_rng([seed, j]), j == len(chunks) - 1)
            for j, ids in enumerate(chunks)]


@st.composite
def buffers(draw):
    n = draw(st.integers(1, 1500))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = np.maximum(rng.lognormal(5, draw(st.sampled_from([0.5, 1.5, 2.5])), n), 1).astype(np.int64)
    cuts = np.sort(rng.choice(np.arange(1, n), min(n - 1, draw(st.integers(0, 8))), replace=False))
    return sizes, np.split(rng.permutation(n), cuts)


@settings(max_examples=200, deadline=None)
@given(case=buffers(), batch=st.integers(1, 40), seed=st.integers(0, 1000))
def test_composer_yields_every_sample_once_in_whole_batches(case, batch, seed):
    sizes, chunks = case
    target = batch * sizes.mean()
    outs = compose(sizes, chunks, batch, target, seed)
    assert sorted(np.concatenate(outs).tolist()) == list(range(len(sizes)))
    assert all(len(out) % batch == 0 for out in outs[:-1])  # the stream cuts into exactly the composed batches
    read = np.cumsum([len(c) for c in chunks])
    yielded = np.cumsum([len(o) for o in outs])
    assert (yielded <= read).all()  # never yields a sample before its buffer is read
    again = compose(sizes, chunks, batch, target, seed)
    assert all(np.array_equal(a, b) for a, b in zip(outs, again))  # a pure function of its inputs
    if batch > 1:
        assert_heavy_runs_start_at_slots(sizes[np.concatenate(outs)] > target, len(outs[-1]), batch)


def assert_heavy_runs_start_at_slots(heavy: np.ndarray, last_buffer: int, batch: int) -> None:
    """Before the last buffer (which may also release at its end), every batch holding a heavy sample
    holds one, in a run of such batches that starts at a heavy slot."""
    batches = heavy[:len(heavy) - last_buffer].reshape(-1, batch).sum(axis=1)
    for j in np.flatnonzero(batches).tolist():
        assert batches[j] == 1
        start = j
        while start % HEAVY_EVERY != HEAVY_EVERY - 1:
            start -= 1
            assert batches[start] == 1


@pytest.mark.parametrize("buffer", range(4))
def test_ranks_put_a_heavy_sample_of_the_same_buffer_in_the_same_step(buffer):
    rng = np.random.default_rng(buffer)
    steps = set()
    for rank in range(8):
        sizes = rng.integers(50, 150, 4096)
        chunks = np.split(rng.permutation(4096), 4)  # 1024 samples = 32 batches per buffer
        sizes[rng.choice(chunks[buffer])] = 40 * 150  # larger than a balanced batch of 32, anywhere in the buffer
        stream = np.concatenate(compose(sizes, chunks, 32, 32 * sizes.mean(), rank))
        steps.add(int(np.flatnonzero(sizes[stream] > 32 * sizes.mean())[0]) // 32)
    assert steps == {heavy_slot(32 * buffer)}


def test_heavy_slot_grid():
    assert [heavy_slot(d) for d in (0, HEAVY_EVERY - 1, HEAVY_EVERY, 3 * HEAVY_EVERY - 1)] == \
        [HEAVY_EVERY - 1] * 2 + [2 * HEAVY_EVERY - 1, 3 * HEAVY_EVERY - 1]


@pytest.mark.parametrize("balance, batch_size, shuffle", [("size", None, "corgipile"), ("dynamic", None, "corgipile"),
                                                           ("size", 4, "block")])
def test_dataset_refuses_size_balance_without_balanced_batches(tmp_path, balance, batch_size, shuffle):
    pytest.importorskip("torch")
    from corgi_io import PackOptions, pack
    from corgi_io.loaders import Batches, CorgiPileDataset, Ranks, Shuffle
    from helpers.corpus_factory import write_text

    for i in range(6):
        write_text(tmp_path / "corpus" / f"c{i % 2}" / f"t{i}.txt", n_tokens=20 + 30 * i, seed=i)
    pack(tmp_path / "corpus", tmp_path / "pack", PackOptions(block_samples=2), workers=1, progress=False)
    ranks = Ranks(rank=0, world_size=2, balance=balance)
    with pytest.raises(ValueError, match=r"Ranks\(balance='(size|dynamic)'\) .*it needs batching=Batches\(\.\.\.\) or "
                                         r"Budget\(\.\.\.\) and Shuffle\('corgipile'\)"):
        CorgiPileDataset(tmp_path / "pack", ranks=ranks, shuffle=Shuffle(shuffle),
                         batching=None if batch_size is None else Batches(batch_size))
    assert len(CorgiPileDataset(tmp_path / "pack", ranks=ranks, batching=Batches(4))) == 1  # batches: 3 samples


@settings(max_examples=80, deadline=None)
@given(counts=st.lists(st.integers(1, 90), min_size=0, max_size=60), buffer_pieces=st.integers(1, 12),
       seed=st.integers(0, 1000))
def test_even_buffers_regroup_the_same_pieces(counts, buffer_pieces, seed):
    counts = np.asarray(counts, np.int64)
    pieces = np.column_stack((np.arange(len(counts)), np.cumsum(counts) - counts, np.cumsum(counts)))
    sizes = np.random.default_rng(seed).lognormal(5, 1.5, int(counts.sum())).astype(np.int64) + 1
    sums = np.array([sizes[a:z].sum() for _, a, z in pieces.tolist()], np.int64)
    out = even_buffers(pieces, sums, buffer_pieces, np.random.default_rng(seed))
    assert sorted(map(tuple, out.tolist())) == sorted(map(tuple, pieces.tolist()))  # one read per piece, as before
    for first in range(0, len(out), buffer_pieces):
        assert (np.diff(out[first:first + buffer_pieces, 0]) > 0).all()  # a buffer reads in epoch order
    np.testing.assert_array_equal(out, even_buffers(pieces, sums, buffer_pieces, np.random.default_rng(seed)))


def test_even_buffers_even_out_buffer_densities():
    rng = np.random.default_rng(4)
    counts = np.full(256, 64)
    sizes = (rng.lognormal(5, 1, 256 * 64) * np.repeat(rng.lognormal(0, 0.5, 256), 64)).astype(np.int64) + 1
    pieces = np.column_stack((np.arange(256), np.arange(256) * 64, np.arange(1, 257) * 64))
    out = even_buffers(pieces, sizes.reshape(256, 64).sum(axis=1), 16, np.random.default_rng(0))
    density = lambda p: np.array([sizes[piece_samples(p[j:j + 16])].mean() for j in range(0, 256, 16)])
    spread = lambda d: d.max() / d.min()
    assert spread(density(out)) < 1.05 < 1.3 < spread(density(pieces))

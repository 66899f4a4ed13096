"""PieceReader: executing buffer plans against real shards through LocalStorage.

One ranged read per piece, samples in plan order with the exact payload bytes, repeated
listings, errors from the read threads surfacing in the consumer, early stops that leave
no thread behind, and concurrent reads through the storage's descriptor cache.
"""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from corgi_io.reading import PieceReader
from corgi_io.manifest import open_manifest
from corgi_io import PackOptions, pack
from corgi_io.schedule import block_pieces, buffer_plan, piece_samples
from corgi_io import CorruptDataError, StorageError
from corgi_io.storage import LocalStorage
from helpers.corpus_factory import make_image_corpus, write_text


@pytest.fixture(scope="module", params=["wds", "tfrecord"])
def packed(request, tmp_path_factory):
    """A 45-sample pack, 6 samples per block (the last one short), several shards; read-only."""
    root = tmp_path_factory.mktemp("br-corpus")
    make_image_corpus(root, 33, long_tail=False, seed=2)
    for i in range(12):
        write_text(root / "text" / f"t{i:02d}.txt", 5 + 11 * i, seed=i)
    out = tmp_path_factory.mktemp(f"br-{request.param}") / "pack"
    m = pack(root, out, PackOptions(format=request.param, block_samples=6, shard_bytes=30_000),
             workers=1, overwrite=True, progress=False)
    assert m.num_samples == 45 and len(m.blocks) == 8 and len(m.shards) >= 3
    return out


def all_pieces(m, order=None):
    order = np.arange(len(m.blocks)) if order is None else np.asarray(order)
    return block_pieces(order, m.blocks.first, m.blocks.count)


def payload(root: Path, m, index: int) -> bytes:
    """A sample's payload read straight from its shard file at the manifest's offset."""
    s = m.samples
    with open(root / m.shards[int(s.shard[index])].path, "rb") as f:
        f.seek(int(s.data_offset[index]))
        return f.read(int(s.bytes[index]))


def new_threads(before: set, grace: float = 5.0) -> set:
    deadline = time.monotonic() + grace
    while True:
        extra = {t for t in threading.enumerate() if t not in before and t.is_alive()}
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.01)


def test_byte_range_of_a_whole_block_is_the_block(packed):
    m = open_manifest(packed)
    reader = PieceReader(m, LocalStorage(packed))
    for b, piece in enumerate(all_pieces(m)):
        path, offset, length = reader.byte_range(piece)
        assert path == m.shards[int(m.blocks.shard[b])].path
        assert (offset, length) == (int(m.blocks.offset[b]), int(m.blocks.length[b]))
    # a piece inside a block starts at its first record and ends with its last one
    s = m.samples
    path, offset, length = reader.byte_range((1, int(m.blocks.first[1]) + 2, int(m.blocks.first[1]) + 4))
    first = int(m.blocks.first[1]) + 2
    assert offset == int(s.offset[first]) and length == int(s.offset[first + 1] + s.length[first + 1]) - offset


@pytest.mark.parametrize("mode", ["corgipile", "block", "window", "full"])
def test_samples_follow_the_plan_with_exact_payloads_and_one_read_per_piece(packed, mode):
    m = open_manifest(packed)
    storage = LocalStorage(packed)
    plan = list(buffer_plan(all_pieces(m, np.random.default_rng(0).permutation(len(m.blocks))), shuffle=mode,
                            buffer_pieces=3, seed=1, epoch=2, window_samples=10))
    got = list(PieceReader(m, storage, prefetch_pieces=2).samples(plan))
    assert [s["index"] for s in got] == np.concatenate([order for _, order in plan]).tolist()
    assert sorted(s["index"] for s in got) == list(range(m.num_samples))
    assert storage.reads == sum(len(p) for p, _ in plan)
    keys = m.keys()
    for s in got:
        i = s["index"]
        assert s["data"] == payload(packed, m, i)
        assert (s["key"], s["label"], s["size"]) == (keys[i], int(m.samples.label[i]), int(m.samples.size[i]))


def test_a_piece_listed_twice_is_read_twice_and_yields_distinct_samples(packed):
    m = open_manifest(packed)
    storage = LocalStorage(packed)
    piece = all_pieces(m)[2:3]
    ids = piece_samples(piece)
    plan = [(np.concatenate([piece, piece]), np.concatenate([ids[::-1], ids]))]  # padding repeats a piece
    got = list(PieceReader(m, storage, 4).samples(plan))
    assert [s["index"] for s in got] == ids[::-1].tolist() + ids.tolist()
    assert storage.reads == 2
    assert len({id(s) for s in got}) == len(got)  # the consumer may mutate one without touching the other
    got[0]["data"] = None
    assert got[len(ids) - 1]["data"] == payload(packed, m, int(ids[0]))


def test_samples_read_for_an_earlier_buffer_can_be_yielded_later(packed):
    m = open_manifest(packed)
    pieces = all_pieces(m)[:3]
    ids = piece_samples(pieces)
    plan = [(pieces[:1], np.zeros(0, np.int64)), (pieces[1:], ids[::-1].copy())]
    got = list(PieceReader(m, LocalStorage(packed), 1).samples(plan))
    assert [s["index"] for s in got] == ids[::-1].tolist()


def test_an_empty_plan_reads_nothing(packed):
    storage = LocalStorage(packed)
    assert list(PieceReader(open_manifest(packed), storage).samples([])) == []
    assert storage.reads == 0


def test_peak_resident_bytes_is_bounded_by_buffer_plus_prefetch(packed):
    m = open_manifest(packed)
    buffer_pieces, prefetch = 2, 2
    reader = PieceReader(m, LocalStorage(packed), prefetch)
    for _ in reader.samples(buffer_plan(all_pieces(m), buffer_pieces=buffer_pieces)):
        time.sleep(0.001)
    largest = int(m.blocks.length.max())
    assert largest < reader.peak_resident_bytes <= (buffer_pieces + prefetch) * largest


def test_peak_resident_bytes_sees_a_full_buffer_plus_the_read_ahead(packed):
    m = open_manifest(packed)
    plan = list(buffer_plan(all_pieces(m), shuffle="block", buffer_pieces=2))
    reader = PieceReader(m, LocalStorage(packed), prefetch_pieces=1)
    for _ in reader.samples(plan):
        time.sleep(0.002)  # the next buffer's first piece is read while this buffer is yielded
    s = m.samples
    # while buffer j's first sample is yielded, all of buffer j's payloads are resident and the
    # next buffer's first piece has been read: the peak is at least that, for some j
    held = [int(s.bytes[order].sum()) + reader.byte_range(plan[j + 1][0][0])[2]
            for j, (_, order) in enumerate(plan[:-1])]
    assert reader.peak_resident_bytes >= max(held)


# --- errors and early stops --------------------------------------------------------------------

@pytest.fixture
def truncated(packed, tmp_path):
    """A copy of the pack whose last shard lost its second half: (root, manifest, shard name)."""
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    m = open_manifest(copy)
    victim = copy / m.shards[-1].path
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    return copy, m, m.shards[-1].path


# unverified, a truncated shard fails at the short read; verified, at the size check before its first read
READ_ERRORS = [(False, StorageError), (True, CorruptDataError)]


@pytest.mark.parametrize("prefetch", [1, 4])
@pytest.mark.parametrize("verify,error", READ_ERRORS)
def test_a_read_error_surfaces_in_the_consumer_naming_the_file(truncated, prefetch, verify, error):
    root, m, name = truncated
    before = set(threading.enumerate())
    got = []
    with pytest.raises(error, match=name) as info:
        for s in PieceReader(m, LocalStorage(root), prefetch, verify=verify).samples(
                buffer_plan(all_pieces(m), shuffle="none", buffer_pieces=1)):
            got.append(s["index"])
    assert "offset" in str(info.value) and str(root) in str(info.value)
    broken = int(m.shards[-1].first_sample)
    assert 0 < len(got) <= broken and got == list(range(len(got)))  # intact blocks were yielded first
    if verify:
        assert len(got) == broken  # the size check fails before the first piece of the truncated shard
    assert not new_threads(before)


@pytest.mark.parametrize("verify,error", READ_ERRORS)
def test_a_read_error_in_the_first_piece_surfaces_before_any_sample(truncated, verify, error):
    root, m, name = truncated
    last = np.array([len(m.blocks) - 1])
    with pytest.raises(error, match=name):
        next(iter(PieceReader(m, LocalStorage(root), 2, verify=verify).samples(buffer_plan(all_pieces(m, last)))))


def test_an_error_raised_by_the_plan_surfaces_in_the_consumer(packed):
    m = open_manifest(packed)

    def plan():
        yield from buffer_plan(all_pieces(m)[:2], buffer_pieces=1)
        raise RuntimeError("plan exploded")

    got = []
    with pytest.raises(RuntimeError, match="plan exploded"):
        for s in PieceReader(m, LocalStorage(packed), 3).samples(plan()):
            got.append(s["index"])
    assert got == list(range(len(got)))  # the plan is walked ahead of the consumer, so maybe fewer


def consume_some(reader, plan, n, out):
    for s in reader.samples(plan):
        out.append(s["index"])
        if len(out) == n:
            break  # the generator is dropped and closed here


@pytest.mark.parametrize("prefetch", [1, 3])
def test_breaking_early_does_not_hang_and_leaves_no_thread(packed, prefetch):
    m = open_manifest(packed)
    before = set(threading.enumerate())
    storage, out = LocalStorage(packed), []
    plan = buffer_plan(all_pieces(m), shuffle="full")  # one read per sample: many reads left to do
    worker = threading.Thread(target=consume_some, args=(PieceReader(m, storage, prefetch), plan, 3, out))
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "stopping early hung"
    assert len(out) == 3
    assert not new_threads(before)
    assert storage.reads <= 3 + prefetch  # it did not keep reading the rest of the epoch


def test_closing_the_generator_explicitly_stops_reading(packed):
    m = open_manifest(packed)
    before = set(threading.enumerate())
    storage = LocalStorage(packed)
    samples = PieceReader(m, storage, 2).samples(buffer_plan(all_pieces(m), buffer_pieces=1))
    next(samples)
    samples.close()
    reads = storage.reads
    assert not new_threads(before)
    time.sleep(0.05)
    assert storage.reads == reads <= 3
    with pytest.raises(StopIteration):
        next(samples)


# --- concurrent reads --------------------------------------------------------------------------

def test_concurrent_reads_with_descriptor_eviction_return_the_right_bytes(packed):
    m = open_manifest(packed)
    assert len(m.shards) > 2
    want = {i: payload(packed, m, i) for i in range(m.num_samples)}
    for epoch in range(40):
        storage = LocalStorage(packed, max_open=1)  # every switch of shard evicts (as > max_open shards do)
        plan = buffer_plan(all_pieces(m), shuffle="full", seed=0, epoch=epoch)
        for s in PieceReader(m, storage, 4, read_threads=2).samples(plan):
            assert s["data"] == want[s["index"]], f"epoch {epoch}: sample {s['index']} has wrong bytes"

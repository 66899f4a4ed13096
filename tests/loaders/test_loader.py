"""CorgiPileDataset end to end on real packs from the corpus factory.

Every shuffle mode and both shard formats; ranks and DataLoader workers without torchrun;
determinism; one storage read per block; the memory bound; decoding through a real
DataLoader with worker processes; a missing shard failing at construction.
"""
from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from itertools import chain, zip_longest
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch
from PIL import Image

from corgi_io.reading import PieceReader
from corgi_io.packing.corpus import discover
from corgi_io.loaders import CorgiPileDataset, Ranks, Reading, Shuffle
from corgi_io import PackOptions, pack
from corgi_io.schedule import block_order, block_pieces, piece_samples
from corgi_io import CorruptDataError, StorageError
from helpers.corpus_factory import make_image_corpus, make_mixed_corpus, write_text

MODES = ("corgipile", "block", "window", "none", "full")
FORMATS = ("wds", "tfrecord")
BLOCK_SAMPLES = 8


class Original(NamedTuple):
    data: bytes
    label_name: str
    size: int
    path: str


def originals_of(root: Path, expected: dict) -> dict:
    """key -> Original, keys as the pack assigns them (corpus discovery), facts from the factory."""
    files = list(discover(root).files())
    assert sorted(rel for _, rel, _ in files) == sorted(expected)
    return {key: Original(Path(path).read_bytes(), expected[rel].label_name, expected[rel].size, path)
            for path, rel, key in files}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """77 samples (no world size 2..5 divides it): images, videos, texts, tricky names."""
    root = tmp_path_factory.mktemp("loader-corpus") / "corpus"
    expected = make_mixed_corpus(root, n_per_class=4)
    expected.update(make_image_corpus(root, 32, long_tail=False, seed=1))
    originals = originals_of(root, expected)
    assert all(len(originals) % w for w in (2, 3, 4, 5))
    return root, originals


@pytest.fixture(scope="module")
def packed(corpus, tmp_path_factory):
    """fmt -> pack directory (read-only: copy before damaging). Many blocks, several shards."""
    root, originals = corpus
    out = {}
    for fmt in FORMATS:
        out[fmt] = tmp_path_factory.mktemp(f"loader-{fmt}") / "pack"
        m = pack(root, out[fmt], PackOptions(format=fmt, block_samples=BLOCK_SAMPLES, shard_bytes=60_000),
                 workers=1, overwrite=True, progress=False)
        assert m.num_samples == len(originals)
        assert len(m.blocks) >= 10 and len(m.shards) >= 3
        assert len(set(m.blocks.count.tolist())) > 1  # a short last block
    return out


def keys(ds) -> list:
    return [s["key"] for s in ds]


def indices(ds) -> list:
    position = {k: i for i, k in enumerate(ds.manifest.keys())}
    return [position[s["key"]] for s in ds]


# --- 1. one epoch, every mode, both formats -------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_one_epoch_yields_every_sample_once_with_original_bytes(corpus, packed, fmt, mode):
    _, originals = corpus
    ds = CorgiPileDataset(packed[fmt], shuffle=Shuffle(mode, buffer_blocks=2), seed=5)
    m = ds.manifest
    got = list(ds)
    assert len(got) == len(ds) == m.num_samples == len(originals)
    assert Counter(s["key"] for s in got) == Counter(originals.keys())
    position = {k: i for i, k in enumerate(m.keys())}
    for s in got:
        assert set(s) >= {"key", "label", "size", "data"}
        i, want = position[s["key"]], originals[s["key"]]
        assert s["index"] == i
        assert type(s["data"]) is bytes
        assert s["data"] == want.data, s["key"]
        assert s["label"] == int(m.samples.label[i]) and m.labels[s["label"]] == want.label_name
        assert s["size"] == int(m.samples.size[i]) == want.size
        assert type(s["label"]) is int and type(s["size"]) is int


def test_a_second_epoch_over_the_same_dataset_object_is_complete(packed):
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle(buffer_blocks=2))
    first = keys(ds)
    ds.set_epoch(1)
    second = keys(ds)
    assert sorted(first) == sorted(second) and len(set(first)) == len(first)
    assert first != second


def block_sequence(m, seed, epoch):
    """Sample ids of the epoch's blocks in block order, block by block."""
    order = block_order(len(m.blocks), seed, epoch)
    return [list(range(int(m.blocks.first[b]), int(m.blocks.first[b] + m.blocks.count[b]))) for b in order]


def test_mode_none_is_pack_order(packed):
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle("none", buffer_blocks=2), seed=9)
    ds.set_epoch(4)
    assert indices(ds) == list(range(ds.manifest.num_samples))


def test_mode_block_is_whole_blocks_in_epoch_block_order(packed):
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle("block", buffer_blocks=2), seed=9)
    ds.set_epoch(4)
    want = list(chain(*block_sequence(ds.manifest, 9, 4)))
    assert indices(ds) == want
    assert want != sorted(want)


def test_mode_corgipile_shuffles_inside_buffers_of_consecutive_blocks(packed):
    buffer_blocks = 3
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle("corgipile", buffer_blocks=buffer_blocks), seed=9)
    ds.set_epoch(4)
    got = indices(ds)
    blocks = block_sequence(ds.manifest, 9, 4)
    start = 0
    for j in range(0, len(blocks), buffer_blocks):
        buffer = list(chain(*blocks[j:j + buffer_blocks]))
        part = got[start:start + len(buffer)]
        assert sorted(part) == sorted(buffer)  # a buffer yields exactly its blocks' samples
        assert part != buffer  # ... shuffled (24 samples: identity has odds 1/24!)
        start += len(buffer)
    assert start == len(got)


def test_mode_window_is_a_bounded_sliding_shuffle_of_the_stored_order(packed):
    """The tf.data / webdataset baseline: a sliding shuffle buffer over the pack's stored order."""
    buffer_blocks = 2
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle("window", buffer_blocks=buffer_blocks), seed=9)
    ds.set_epoch(4)
    got = indices(ds)
    stream = list(range(ds.manifest.num_samples))
    capacity = int(buffer_blocks * ds.manifest.blocks.count.mean())
    arrival = {x: p for p, x in enumerate(stream)}
    assert sorted(got) == sorted(stream) and got != stream
    # output t is drawn from the window after input t + capacity has arrived, never later input
    assert all(arrival[x] <= t + capacity for t, x in enumerate(got))


def test_mode_full_is_a_permutation_that_ignores_block_boundaries(packed):
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle("full"), seed=9)
    got = indices(ds)
    assert sorted(got) == list(range(ds.manifest.num_samples))
    runs = sum(1 for a, b in zip(got, got[1:]) if b == a + 1)
    assert runs < len(got) // 4  # not block-contiguous


def test_bad_arguments_are_rejected(packed):
    with pytest.raises(ValueError, match="shuffle"):
        CorgiPileDataset(packed["wds"], shuffle=Shuffle("random"))
    with pytest.raises(ValueError, match="decode"):
        CorgiPileDataset(packed["wds"], decode="jpeg")
    with pytest.raises(ValueError, match="rank"):
        CorgiPileDataset(packed["wds"], ranks=Ranks(rank=3, world_size=3))


# --- 2. ranks x workers without torchrun ------------------------------------------------------

def epoch_sequence(m, seed, epoch):
    return piece_samples(block_pieces(block_order(len(m.blocks), seed, epoch), m.blocks.first, m.blocks.count))


def rank_worker_samples(ds, num_workers):
    """What each emulated DataLoader worker of this rank yields: a list of sample dicts per worker."""
    return [list(PieceReader(ds.manifest, ds.storage, 2).samples(ds.plan(worker, num_workers)))
            for worker in range(num_workers)]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_ranks_and_workers_cover_every_sample_with_equal_counts(corpus, packed, world, drop_last):
    _, originals = corpus
    seed, epoch = 7, 3
    for num_workers in (1, 2, 3):
        seen = Counter()
        for rank in range(world):
            ds = CorgiPileDataset(packed["tfrecord"], shuffle=Shuffle("corgipile", buffer_blocks=2), seed=seed,
                                  ranks=Ranks(drop_last=drop_last, rank=rank, world_size=world))
            ds.set_epoch(epoch)
            m, n = ds.manifest, ds.manifest.num_samples
            per_worker = rank_worker_samples(ds, num_workers)
            assert sum(map(len, per_worker)) == len(ds), (rank, num_workers)
            assert max(map(len, per_worker)) - min(map(len, per_worker)) <= 1
            for sample in chain(*per_worker):
                assert sample["key"] == m.key(sample["index"])
                assert sample["data"] == originals[sample["key"]].data
                seen[sample["index"]] += 1
        if drop_last:
            assert len(ds) == n // world
            assert max(seen.values()) == 1 and sum(seen.values()) == world * (n // world)
        else:
            assert len(ds) == -(-n // world)
            assert set(seen) == set(range(n))
            padding = world * len(ds) - n
            assert sum(seen.values()) - n == padding
            # documented padding: repeats of the head of the epoch's sample sequence
            repeated = sorted(i for i, c in seen.items() for _ in range(c - 1))
            assert repeated == sorted(epoch_sequence(m, seed, epoch)[:padding].tolist())


def test_world_size_larger_than_the_dataset_with_drop_last_yields_nothing(packed):
    n = CorgiPileDataset(packed["wds"]).manifest.num_samples
    ds = CorgiPileDataset(packed["wds"], ranks=Ranks(drop_last=True, rank=0, world_size=n + 1))
    assert len(ds) == 0 and list(ds) == []
    ds = CorgiPileDataset(packed["wds"], ranks=Ranks(rank=n, world_size=n + 1))
    assert len(ds) == 1 and len(list(ds)) == 1


def interleave(*streams):
    return [x for group in zip_longest(*streams) for x in group if x is not None]


@pytest.mark.slow
def test_dataloader_workers_per_rank_match_the_plan(packed):
    """A real DataLoader(num_workers=2) per rank: counts equal, union complete, order = plan."""
    world, seen = 3, Counter()
    for rank in range(world):
        ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle(buffer_blocks=2), seed=11,
                              ranks=Ranks(rank=rank, world_size=world))
        ds.set_epoch(2)
        loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None, timeout=60)
        got = [s["key"] for s in loader]
        assert len(got) == len(ds)
        m = ds.manifest
        planned = [[m.key(i) for _, order in ds.plan(w, 2) for i in order.tolist()] for w in range(2)]
        assert got == interleave(*planned)  # worker-discovered split, round-robin as DataLoader yields
        seen.update(got)
    n = ds.manifest.num_samples
    assert len(seen) == n and sum(seen.values()) == world * len(ds)


# --- 3. determinism ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["corgipile", "window", "full", "block"])
def test_same_seed_and_epoch_give_the_same_sequence(packed, mode):
    def run(seed, epoch, **kw):
        ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle(mode, buffer_blocks=2), seed=seed, **kw)
        ds.set_epoch(epoch)
        return keys(ds)

    a = run(1, 2)
    assert run(1, 2) == a
    assert run(1, 3) != a and sorted(run(1, 3)) == sorted(a)
    assert run(2, 2) != a
    assert run(1, 2, ranks=Ranks(rank=1, world_size=2)) == run(1, 2, ranks=Ranks(rank=1, world_size=2))
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle(mode, buffer_blocks=2), seed=1)
    ds.set_epoch(3)
    keys(ds)
    ds.set_epoch(2)
    assert keys(ds) == a  # set_epoch alone decides; no state leaks from the previous epoch


def test_mode_none_ignores_seed_and_epoch(packed):
    a = CorgiPileDataset(packed["wds"], shuffle=Shuffle("none"), seed=1)
    b = CorgiPileDataset(packed["wds"], shuffle=Shuffle("none"), seed=2)
    b.set_epoch(5)
    assert keys(a) == keys(b)


def test_two_ranks_read_different_samples(packed):
    r0 = CorgiPileDataset(packed["wds"], shuffle=Shuffle(buffer_blocks=2), seed=1, ranks=Ranks(rank=0, world_size=2))
    r1 = CorgiPileDataset(packed["wds"], shuffle=Shuffle(buffer_blocks=2), seed=1, ranks=Ranks(rank=1, world_size=2))
    a, b = keys(r0), keys(r1)
    assert len(a) == len(b) and set(a) != set(b)


# --- 4. read counting -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["corgipile", "block", "window"])
def test_one_storage_read_per_block(packed, fmt, mode):
    ds = CorgiPileDataset(packed[fmt], shuffle=Shuffle(mode, buffer_blocks=2))
    m = ds.manifest
    assert ds.storage.reads == 0  # construction checks shards without reading them
    count = sum(1 for _ in ds)
    pieces = sum(len(p) for p, _ in ds.plan())
    assert pieces == len(m.blocks)
    assert ds.storage.reads == pieces == len(m.blocks) < count // 4
    assert ds.storage.bytes_read == int(m.blocks.length.sum())  # whole blocks, each once
    sum(1 for _ in ds)
    assert ds.storage.reads == 2 * len(m.blocks)


def test_full_mode_reads_once_per_sample(packed):
    ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle("full"))
    m = ds.manifest
    assert sum(1 for _ in ds) == m.num_samples
    assert ds.storage.reads == m.num_samples == sum(len(p) for p, _ in ds.plan())
    assert ds.storage.bytes_read == int(m.samples.length.sum())


@pytest.mark.parametrize("world", [2, 3])
def test_reads_per_rank_equal_the_pieces_of_its_plan(packed, world):
    total = 0
    for rank in range(world):
        ds = CorgiPileDataset(packed["wds"], shuffle=Shuffle(buffer_blocks=2), seed=4,
                              ranks=Ranks(rank=rank, world_size=world))
        m = ds.manifest
        n = sum(1 for _ in ds)
        plan = list(ds.plan())
        assert ds.storage.reads == sum(len(p) for p, _ in plan)
        assert ds.storage.reads <= -(-len(m.blocks) // world) + 2  # a cut splits at most the end blocks
        assert n == len(ds)
        total += ds.storage.reads
    assert total <= len(m.blocks) + 2 * world  # never per sample


# --- 5. memory bound --------------------------------------------------------------------------

def write_big_text(path: Path, nbytes: int, seed: int) -> None:
    """Random lowercase words: ~nbytes of incompressible-ish UTF-8 text."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(letters[rng.integers(0, len(letters), nbytes)].tobytes())


@pytest.fixture(scope="module")
def big_pack(tmp_path_factory):
    """24 text samples of 180..220 KB, two per block: 12 blocks of about 400 KB."""
    root = tmp_path_factory.mktemp("big-corpus")
    rng = np.random.default_rng(3)
    for i in range(24):
        write_big_text(root / f"class{i % 2}" / f"t{i:03d}.txt", int(rng.integers(180_000, 220_000)), i)
    out = tmp_path_factory.mktemp("big-pack") / "pack"
    m = pack(root, out, PackOptions(block_samples=2), workers=1, overwrite=True, progress=False)
    assert len(m.blocks) == 12
    return out


def slow_epoch(ds, pause=0.003, on_sample=None):
    for s in ds:
        if on_sample:
            on_sample(s)
        time.sleep(pause)  # the read-ahead thread runs as far ahead as it may


@pytest.mark.parametrize("mode", ["corgipile", "block", "window"])
def test_resident_data_stays_within_buffer_plus_prefetch(big_pack, mode):
    buffer_blocks, prefetch_blocks = 2, 1
    ds = CorgiPileDataset(big_pack, shuffle=Shuffle(mode, buffer_blocks=buffer_blocks),
                          reading=Reading(prefetch_blocks=prefetch_blocks))
    largest = int(ds.manifest.blocks.length.max())
    slow_epoch(ds)
    peak = ds.last_reader.peak_resident_bytes
    window_piece = 1 if mode == "window" else 0  # the piece being pushed through the window is held too
    assert peak <= (buffer_blocks + window_piece + prefetch_blocks) * largest
    assert peak > largest  # the read-ahead really held more than one block


@pytest.mark.parametrize("buffer_blocks, prefetch_blocks", [(2, 1), (3, 2)])
def test_pieces_held_never_exceed_buffer_plus_prefetch(big_pack, buffer_blocks, prefetch_blocks):
    """Independent of peak_resident_bytes: pieces whose read has started (storage.reads counts
    a read as it starts) but whose samples are not all yielded yet, after every sample."""
    ds = CorgiPileDataset(big_pack, shuffle=Shuffle("corgipile", buffer_blocks=buffer_blocks),
                          reading=Reading(prefetch_blocks=prefetch_blocks))
    m = ds.manifest
    position = {k: i for i, k in enumerate(m.keys())}
    block_of = np.repeat(np.arange(len(m.blocks)), m.blocks.count)
    left = dict(enumerate(m.blocks.count.tolist()))  # samples of each block not yet yielded
    held = []

    def on_sample(s):
        block = int(block_of[position[s["key"]]])
        left[block] -= 1
        done = sum(1 for c in left.values() if c == 0)
        time.sleep(0.003)  # let the read-ahead thread go as far as it is allowed
        held.append(ds.storage.reads - done)

    slow_epoch(ds, on_sample=on_sample)
    assert max(held) >= buffer_blocks  # the measurement sees a full buffer
    assert max(held) == buffer_blocks + prefetch_blocks, held  # bounded, and the read-ahead is used


# --- 6. decoding through a real DataLoader with worker processes ----------------------------

@pytest.fixture(scope="module")
def image_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("img-corpus")
    expected = make_image_corpus(root, 30, long_tail=False, seed=5)
    out = tmp_path_factory.mktemp("img-pack") / "pack"
    pack(root, out, PackOptions(format="tfrecord", block_samples=4), workers=1, overwrite=True, progress=False)
    return out, originals_of(root, expected)


@pytest.fixture(scope="module")
def text_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("text-corpus")
    for i in range(22):
        write_text(root / ("news", "poems")[i % 2] / f"doc{i:02d}.txt", 1 + 7 * i, seed=i)
    out = tmp_path_factory.mktemp("text-pack") / "pack"
    pack(root, out, PackOptions(format="wds", block_samples=4), workers=1, overwrite=True, progress=False)
    return out, {key: Path(path).read_text(encoding="utf-8") for path, _, key in discover(root).files()}


def source_rgb(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def to_chw(t):
    return t.permute(2, 0, 1).contiguous()


def shout(text):
    return text.upper()


def rgb_facts(image):
    """decode="rgb", seen in the worker: the `to_chw` transform checked, then ((H, W), mode, (H, W, 3) pixels)."""
    chw = to_chw(image)
    assert isinstance(chw, torch.Tensor) and chw.dtype == torch.uint8 and chw.shape[0] == 3
    return tuple(chw.shape[1:]), "RGB", chw.permute(1, 2, 0).numpy()


def pil_facts(image):
    """decode="pil", seen in the worker: ((H, W), mode, (H, W, 3) pixels) of the PIL image."""
    return (image.size[1], image.size[0]), image.mode, np.asarray(image)


@pytest.mark.slow
@pytest.mark.parametrize("decode, facts", [("rgb", rgb_facts), ("pil", pil_facts)], ids=["rgb", "pil"])
def test_dataloader_decodes_every_image_exactly(image_pack, decode, facts):
    path, originals = image_pack
    ds = CorgiPileDataset(path, shuffle=Shuffle(buffer_blocks=2), decode=decode, transform=facts)
    got = list(torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None, timeout=60))
    assert len(got) == len(ds) == len(originals)
    assert Counter(s["key"] for s in got) == Counter(originals.keys())
    for s in got:
        want = source_rgb(originals[s["key"]].path)
        shape, mode, pixels = s["data"]
        assert tuple(shape) == want.shape[:2] and mode == "RGB"
        assert np.array_equal(np.asarray(pixels), want)


def test_rgb_decode_without_transform_is_hwc_uint8(image_pack):
    path, originals = image_pack
    for s in CorgiPileDataset(path, decode="rgb"):
        want = source_rgb(originals[s["key"]].path)
        assert s["data"].dtype == torch.uint8 and tuple(s["data"].shape) == want.shape == (*want.shape[:2], 3)
        assert np.array_equal(s["data"].numpy(), want)


@pytest.mark.slow
def test_dataloader_decodes_text_with_a_transform(text_pack):
    path, texts = text_pack
    ds = CorgiPileDataset(path, shuffle=Shuffle(buffer_blocks=2), decode="text", transform=shout)
    got = list(torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None, timeout=60))
    assert len(got) == len(ds) == len(texts) == 22
    assert Counter(s["key"] for s in got) == Counter(texts.keys())
    for s in got:
        assert s["data"] == texts[s["key"]].upper()
        assert s["size"] == len(texts[s["key"]].split())


def test_callable_decode_gets_bytes_and_the_sample(text_pack):
    path, texts = text_pack
    seen = []

    def decode(data, sample):
        seen.append((type(data), sample["key"], sample["size"]))
        return (sample["key"], len(data))

    got = list(CorgiPileDataset(path, decode=decode))
    assert {s["key"]: s["data"] for s in got} == {k: (k, len(t.encode())) for k, t in texts.items()}
    assert all(t is bytes for t, _, _ in seen) and len(seen) == len(texts)


# --- 7. missing and resized shards fail lazily, before any of their samples -------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shuffle", ["none", "full"])
def test_missing_shard_fails_on_first_read_naming_the_file(packed, tmp_path, fmt, shuffle):
    copy = tmp_path / "copy"
    shutil.copytree(packed[fmt], copy)
    shards = sorted(p for p in copy.iterdir() if p.name.startswith("shard-") and not p.name.endswith(".index"))
    victim = shards[1]
    victim.unlink()
    ds = CorgiPileDataset(f"file://{copy}", shuffle=Shuffle(shuffle, buffer_blocks=1),
                          reading=Reading(prefetch_blocks=1))  # no stat per shard
    lost = set(ds.manifest.keys(ds.manifest.shards[1].first_sample,
                                ds.manifest.shards[1].first_sample + ds.manifest.shards[1].samples))
    got = []
    with pytest.raises(StorageError, match=victim.name) as info:
        for s in ds:
            got.append(s["key"])
    assert str(copy) in str(info.value) and "missing" in str(info.value)
    assert not lost & set(got)


def test_truncated_shard_fails_while_iterating_naming_the_file(packed, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(packed["wds"], copy)
    victim = sorted(copy.glob("shard-*.tar"))[-1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    ds = CorgiPileDataset(copy, shuffle=Shuffle("none", buffer_blocks=1), reading=Reading(prefetch_blocks=1))
    before = set(threading.enumerate())
    got = []
    with pytest.raises(CorruptDataError, match=victim.name) as info:
        for s in ds:
            got.append(s["key"])
    assert "truncated" in str(info.value) and info.value.shard == victim.name
    assert got == ds.manifest.keys()[:ds.manifest.shards[-1].first_sample]  # every intact shard, none of the victim
    assert not set(threading.enumerate()) - before  # no read thread left behind

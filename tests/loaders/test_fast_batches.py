"""Issue 20 §4: raw-bytes batches built from the read pieces with numpy are exactly the per-sample path's batches.

Every test runs the same dataset twice: as it comes (the fast path, `fast_batches`), and with a collate_fn
that only calls `collate_samples` (which turns the fast path off), and compares the batches field by field:
names and their order, tensor dtypes and values, lists, and the PackedBytes buffer and offsets."""
from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io import CorruptDataError, PackOptions, pack
from corgi_io.loaders import Batches, Blend, Cache, CorgiPileDataset, PackedBytes, Ranks, Reading, Shuffle
from corgi_io.loaders.collate import collate_samples
from corgi_io.reading.piece_reader import Residency
from corgi_io.reading.raw_batches import PieceRows, ResidentRows
from corgi_io.reading.split import PieceSplitter
from helpers.corpus_factory import write_image, write_text
from helpers.packs import flip

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def per_sample(samples):
    """The default collate behind a custom collate_fn: the dataset takes its per-sample path."""
    return collate_samples(samples)


def text_source(root, n: int):
    for i in range(n):
        write_text(root / f"c{i % 3}" / f"t{i:03d}.txt", 1 + (i * 7) % 31, seed=i)
    return root


@pytest.fixture(scope="module", params=["wds", "tfrecord"])
def texts(request, tmp_path_factory):
    """A pack of 150 texts of varied lengths, blocks of 8, several shards, in each format."""
    source = text_source(tmp_path_factory.mktemp("fast-corpus"), 150)
    root = tmp_path_factory.mktemp(f"fast-{request.param}") / "pack"
    pack(source, root, PackOptions(format=request.param, block_samples=8, shard_bytes=6_000), progress=False)
    return root


def both(root, batching: Batches, **options):
    """(fast dataset, per-sample dataset) of the same options: the second's batches collated by `per_sample`."""
    fast = CorgiPileDataset(root, batching=batching, **options)
    slow = CorgiPileDataset(root, batching=dataclasses.replace(batching, collate_fn=per_sample), **options)
    assert fast.fast_batches and not slow.fast_batches
    return fast, slow


def assert_same(fast_batches, slow_batches):
    fast_batches, slow_batches = list(fast_batches), list(slow_batches)
    assert len(fast_batches) == len(slow_batches) > 0
    for got, want in zip(fast_batches, slow_batches):
        assert type(got) is type(want) and list(got) == list(want)
        for name, value in want.items():
            if isinstance(value, torch.Tensor):
                assert got[name].dtype == value.dtype and torch.equal(got[name], value), name
            elif isinstance(value, PackedBytes):
                assert type(got[name]) is PackedBytes and type(got[name].buffer) is bytes
                assert got[name].buffer == value.buffer and np.array_equal(got[name].offsets, value.offsets)
                assert got[name].offsets.dtype == value.offsets.dtype
            else:
                assert type(got[name]) is type(value) and got[name] == value, name


@pytest.mark.parametrize("shuffle", ["corgipile", "block", "window", "none", "full"])
def test_every_shuffle_gives_the_per_sample_batches(texts, shuffle):
    fast, slow = both(texts, Batches(7), shuffle=Shuffle(shuffle, buffer_blocks=3), seed=3)
    fast.set_epoch(2), slow.set_epoch(2)
    assert len(fast) == len(slow)
    assert_same(fast, slow)


@pytest.mark.parametrize("batching, options", [
    (Batches(16), {"ranks": Ranks(balance="size")}), (Batches(16, group_by_size=True), {}),
    (Batches(16), {"ranks": Ranks(drop_last=True)}), (Batches(16), {"reading": Reading(verify=False)}),
    (Batches(16), {"shuffle": Shuffle(buffer_blocks=1), "reading": Reading(prefetch_blocks=1)})])
def test_balanced_grouped_and_unverified_batches_are_the_per_sample_ones(texts, batching, options):
    assert_same(*both(texts, batching, seed=1, **options))


@pytest.mark.parametrize("workers", [0, 2])
def test_two_ranks_with_two_workers_each(texts, workers):
    for rank in range(2):
        fast, slow = both(texts, Batches(9), seed=4, ranks=Ranks(rank=rank, world_size=2, balance="size"))
        loaders = [torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, timeout=60 if workers else 0)
                   for ds in (fast, slow)]
        assert len(loaders[0]) == len(loaders[1])
        assert_same(*loaders)


def test_a_resumed_epoch_continues_as_the_per_sample_path_does(texts):
    """The resume point counts samples in both paths: a state saved after 3 batches resumes the same batches."""
    rest = []
    for ds, fresh in zip(both(texts, Batches(8), seed=2), both(texts, Batches(8), seed=2)):
        loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        del it
        resumed = StatefulDataLoader(fresh, batch_size=None, num_workers=2)
        resumed.load_state_dict(state)
        rest.append(list(resumed))
        assert 0 < len(rest[-1]) < len(ds)
    assert_same(*rest)


def test_a_blend_gives_the_per_sample_batches_with_their_sources(tmp_path_factory):
    packs = {name: text_pack_of(tmp_path_factory, name, n) for name, n in (("web", 90), ("code", 31))}
    fast, slow = both(Blend(packs, weights={"web": 0.7, "code": 0.3}, samples_per_epoch=150), Batches(10), seed=5)
    batches = list(fast)
    assert batches[0]["source"] and set(sum((b["source"] for b in batches), [])) == {"web", "code"}
    assert_same(batches, slow)


def text_pack_of(tmp_path_factory, name: str, n: int):
    root = tmp_path_factory.mktemp(f"fast-blend-{name}") / "pack"
    pack(text_source(tmp_path_factory.mktemp(f"fast-blend-src-{name}"), n), root, PackOptions(block_samples=8),
         progress=False)
    return root


def test_a_cached_remote_pack_gives_the_per_sample_batches(http_root, texts, tmp_path):
    directory, base_url = http_root
    served = f"fast-{texts.parent.name}"
    shutil.copytree(texts, directory / served, dirs_exist_ok=True)
    url = f"{base_url.rstrip('/')}/{served}"
    fast, slow = both(url, Batches(12), seed=6, shuffle=Shuffle(buffer_blocks=2), reading=Reading(prefetch_blocks=2),
                      cache=Cache(tmp_path / "cache", 1 << 20))
    assert_same(fast, slow)
    assert fast.last_reader.cache.fetches + fast.last_reader.cache.hits > 0  # read through the cache
    assert_same(fast, slow)  # again, from the cache


def test_packs_of_several_fields_per_sample_take_the_per_sample_path(tmp_path):
    for i in range(4):
        stem = tmp_path / "src" / "cat" / f"{i:03d}"
        write_image(stem.with_suffix(".jpg"), 8, 6, seed=i)
        stem.with_suffix(".txt").write_text(f"caption {i}", encoding="utf-8")
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(), progress=False)
    ds = CorgiPileDataset(tmp_path / "pack", batching=Batches(2), seed=0)
    assert not ds.fast_batches
    assert all(batch["fields"] == [["jpg", "txt"]] * 2 for batch in ds)


def test_decode_transform_or_another_collate_take_the_per_sample_path(texts):
    for options in ({"decode": "text", "batching": Batches(4)}, {"transform": len, "batching": Batches(4)},
                    {"batching": Batches(4, collate_fn=per_sample)}, {}):
        assert not CorgiPileDataset(texts, **options).fast_batches
    assert CorgiPileDataset(texts, batching=Batches(4)).fast_batches


def test_a_corrupted_record_raises_naming_shard_offset_and_key(texts, tmp_path):
    copy = tmp_path / "pack"
    shutil.copytree(texts, copy)
    fast = CorgiPileDataset(copy, batching=Batches(8), seed=0, shuffle=Shuffle("none"))
    m = fast.manifest
    bad = 37
    shard = m.shards[int(m.samples.shard[bad])].path
    flip(copy / shard, int(m.samples.data_offset[bad]))
    with pytest.raises(CorruptDataError) as info:
        list(fast)
    assert (info.value.shard, info.value.offset, info.value.key) == (shard, int(m.samples.offset[bad]), m.key(bad))


def test_the_fast_path_builds_no_sample_dicts(texts, monkeypatch):
    monkeypatch.setattr(PieceSplitter, "split", lambda *a: pytest.fail("a sample dict was built"))
    assert sum(len(batch["data"]) for batch in CorgiPileDataset(texts, batching=Batches(5))) == 150


def rows_of(first: int, payloads: list) -> PieceRows:
    """A piece of `payloads` (its first id `first`) with only the columns a batch needs."""
    ends = np.cumsum([len(p) for p in payloads])
    n = len(payloads)
    columns = {"begin": ends - [len(p) for p in payloads], "end": ends, "index": np.arange(first, first + n),
               "key": np.array([f"k{first + i}" for i in range(n)], dtype=object), "label": np.zeros(n, np.int64),
               "size": np.ones(n, np.int64), "kind": np.full(n, "text", object), "ext": np.full(n, "txt", object)}
    return PieceRows(first, b"".join(payloads), columns)


def test_resident_rows_repeat_a_twice_read_sample_and_free_what_is_batched():
    residency = Residency()
    rows = ResidentRows(residency)
    payloads = [bytes([i]) * (10 + i) for i in range(6)]
    residency.hold(sum(map(len, payloads)) + len(b"".join(payloads[2:4])))
    rows.add(rows_of(0, payloads))
    rows.add(rows_of(2, payloads[2:4]))  # padding read ids 2 and 3 again: each is listed twice
    rows.flush()
    batch = rows.take(np.array([3, 0, 3, 2, 5]))
    assert [batch.buffer[a:z] for a, z in zip(batch.offsets[:-1], batch.offsets[1:])] == \
        [payloads[i] for i in (3, 0, 3, 2, 5)]
    assert batch.columns["key"].tolist() == ["k3", "k0", "k3", "k2", "k5"]
    rows.compact()  # ids 1, 2 and 4 still due: less than half of the first piece's bytes, copied out
    assert sorted(rows.table["id"].tolist()) == [1, 2, 4] and len(rows.views) == 1
    assert residency.held == sum(len(payloads[i]) for i in (1, 2, 4))
    with pytest.raises(KeyError):
        rows.take(np.array([0]))  # already batched: a broken plan


def test_a_batch_gathered_into_shared_memory_crosses_processes_as_a_handle():
    from multiprocessing.reduction import ForkingPickler

    from corgi_io.loaders.fast_batches import SharedPackedBytes, row_batch, shared_buffer

    payloads = [bytes([i]) * (5000 + i) for i in range(6)]
    rows = ResidentRows(Residency(), allocate=shared_buffer)
    rows.add(rows_of(0, payloads))
    rows.flush()
    batch = row_batch(rows.take(np.array([4, 1, 5])))
    data = batch["data"]
    assert type(data) is SharedPackedBytes and data.tensor.is_shared()
    assert list(data) == [payloads[i] for i in (4, 1, 5)] and data[1] == payloads[1] and type(data[0]) is bytes
    pickled = ForkingPickler.dumps(batch)
    assert len(pickled) < 5000  # the payloads' memory travels as a handle, not in the pickle
    received = ForkingPickler.loads(pickled)["data"]
    assert type(received) is PackedBytes and received.buffer == b"".join(payloads[i] for i in (4, 1, 5))
    empty = ResidentRows(Residency(), allocate=shared_buffer)
    empty.add(rows_of(0, [b"", b""]))  # no bytes at all: no shared memory to map
    empty.flush()
    received = ForkingPickler.loads(ForkingPickler.dumps(row_batch(empty.take(np.array([1, 0])))["data"]))
    assert list(received) == [b"", b""]


def test_a_worker_reuses_a_shared_buffer_only_once_its_batch_was_copied_out_and_dropped():
    from multiprocessing.reduction import ForkingPickler

    from corgi_io.loaders.fast_batches import SharedPackedBytes
    from corgi_io.loaders.shared_memory import SharedBuffers

    pool = SharedBuffers()

    def batch(payload: bytes):
        whole, view = pool.take(len(payload))
        view[:] = payload
        return SharedPackedBytes(whole, np.array([0, len(payload)]))

    first = batch(b"a" * 1000)
    pointer = first.tensor.data_ptr()
    pickled = ForkingPickler.dumps(first)
    assert batch(b"b" * 10).tensor.data_ptr() != pointer  # still referred to here, and not yet received
    del first
    assert batch(b"c" * 10).tensor.data_ptr() != pointer  # sent, not yet copied out by its receiver
    assert list(ForkingPickler.loads(pickled)) == [b"a" * 1000]  # the receiver copies it out, flags it released
    again = batch(b"d" * 20)
    assert again.tensor.data_ptr() == pointer and list(again) == [b"d" * 20]
    assert len(pool.buffers) <= SharedBuffers.KEEP


def test_read_buffers_are_reused_across_epochs_without_changing_a_batch(texts):
    fast, slow = both(texts, Batches(6), seed=8, shuffle=Shuffle(buffer_blocks=2), reading=Reading(prefetch_blocks=2))
    for epoch in range(3):
        fast.set_epoch(epoch), slow.set_epoch(epoch)
        assert_same(fast, slow)
        pool = fast.packs._pool
        if epoch == 0:
            buffers = {id(buffer) for buffer in pool._free}
        assert len(pool._free) <= 2 * 2 + 2  # at most the pieces held at once: two buffers', and those read ahead
    assert buffers and buffers <= {id(buffer) for buffer in pool._free}  # the first epoch's buffers, reused


def test_a_short_read_into_a_buffer_is_a_storage_error(texts):
    from corgi_io import StorageError
    from corgi_io.storage import open_storage

    storage = open_storage(str(texts))
    shard = sorted(p.name for p in texts.iterdir() if p.suffix in (".tar", ".tfrecord"))[0]
    size = (texts / shard).stat().st_size
    assert bytes(storage.read_range_into(shard, 10, memoryview(bytearray(5)))) == storage.read_range(shard, 10, 5)
    with pytest.raises(StorageError, match="short read"):
        storage.read_range_into(shard, size - 3, memoryview(bytearray(8)))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc: its adaptive mmap threshold")
def test_batch_sized_buffers_reuse_memory_once_batch_memory_is_warm():
    program = """if True:
        import resource, sys
        from corgi_io.reading.buffers import warm_batch_memory
        if sys.argv[1] == "warm":
            warm_batch_memory()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for n in range(20):
            batch = b"x" * ((4 << 20) + n * 4096)  # a batch's bytes, written once, freed
            del batch
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)"""
    import corgi_io

    env = {**os.environ, "PYTHONPATH": str(Path(corgi_io.__file__).parents[1])}  # the corgi_io under test
    faults = {mode: int(subprocess.run([sys.executable, "-c", program, mode], capture_output=True, text=True,
                                       env=env, check=True).stdout) for mode in ("cold", "warm")}
    assert faults["cold"] > 10 * 1024 and faults["warm"] < 2 * 1024  # ~1,000 faults per buffer, or for one only

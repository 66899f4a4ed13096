"""CorgiPileDataset with a cache of remote pieces (cache=Cache(...)): over a real nginx, every epoch yields what the
uncached remote read yields, the limit holds, a damaged cached file is fetched again, two processes sharing a
folder fetch each piece once, and resume works; local packs are never cached."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from corgi_io import ArgumentError, PackOptions, pack
from corgi_io.loaders import Blend, Cache, CorgiPileDataset, Reading, Shuffle
from helpers.corpus_factory import write_text

OPTIONS = {"shuffle": Shuffle(buffer_blocks=2), "reading": Reading(prefetch_blocks=2), "seed": 5}


@pytest.fixture(scope="module")
def local_pack(tmp_path_factory):
    """A pack of 60 texts, 4 samples per block (15 blocks), several shards."""
    source = tmp_path_factory.mktemp("cache-corpus")
    for i in range(60):
        write_text(source / f"c{i % 3}" / f"t{i:02d}.txt", 40 + 7 * (i % 13), seed=i)
    out = tmp_path_factory.mktemp("cache-pack") / "pack"
    pack(source, out, PackOptions(block_samples=4, shard_bytes=4_000), workers=1, overwrite=True, progress=False)
    return out


@pytest.fixture(scope="module")
def url(http_root, local_pack):
    directory, base_url = http_root
    shutil.copytree(local_pack, directory / "cache-pack", dirs_exist_ok=True)
    return f"{base_url.rstrip('/')}/cache-pack"


def pack_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.glob("*.tar"))


def folder_bytes(cache_dir: Path) -> int:
    """Bytes of the cached pieces now in the folder (not the kept row groups, `<pack>-rows/`, which the limit does
    not count: docs/operations.md). The read-ahead thread evicts while we list, so a file that vanishes between
    the listing and its stat counts as gone (it is)."""
    total = 0
    for path in cache_dir.rglob("*"):
        if path.name.startswith(".") or path.parent.name.endswith("-rows"):
            continue
        try:
            total += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:
            pass
    return total


def epoch_samples(ds, epoch: int, during=None) -> list:
    ds.set_epoch(epoch)
    samples = []
    for sample in ds:
        samples.append((sample["index"], sample["key"], sample["data"]))
        if during is not None:
            during()
    return samples


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["belady", "lru"])
def test_cached_epochs_yield_the_remote_read_and_the_limit_holds(url, local_pack, tmp_path, policy):
    limit = pack_bytes(local_pack) // 2
    plain = CorgiPileDataset(url, **OPTIONS)
    cached = CorgiPileDataset(url, **OPTIONS, cache=Cache(tmp_path, limit, policy=policy))

    def within_limit():
        assert folder_bytes(tmp_path) <= limit

    for epoch in range(3):
        before = cached.storage.bytes_read
        got = epoch_samples(cached, epoch, during=within_limit)
        assert got == epoch_samples(plain, epoch)
        assert sorted(index for index, _, _ in got) == list(range(plain.manifest.num_samples))
        if epoch:  # the cache saved some fetches
            assert cached.last_reader.cache.hits > 0
            assert cached.storage.bytes_read - before < plain.storage.bytes_read / (epoch + 1)


@pytest.mark.slow
def test_a_damaged_cached_piece_is_fetched_again(url, local_pack, tmp_path):
    ds = CorgiPileDataset(url, **OPTIONS, cache=Cache(tmp_path, 10 * pack_bytes(local_pack)))
    want = epoch_samples(ds, 0)
    ds.last_reader.cache.wait_warm()  # the pieces written in the background are all in place
    files = sorted(path for path in tmp_path.rglob("*") if path.is_file() and not path.name.startswith(".")
                   and not path.parent.name.endswith("-rows"))  # pieces, not the kept row groups
    damaged = files[len(files) // 2]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    fetched = ds.storage.bytes_read
    assert epoch_samples(ds, 0) == want
    cache = ds.last_reader.cache
    assert cache.refetches == 1 and ds.storage.bytes_read - fetched == len(data)
    cache.wait_warm()
    assert damaged.read_bytes() != bytes(data)  # the good copy replaced it


@pytest.mark.slow
def test_two_processes_sharing_a_folder_fetch_each_piece_once(url, local_pack, tmp_path):
    cache_dir, limit = tmp_path / "cache", 10 * pack_bytes(local_pack)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), str(Path(__file__).parents[1])])}
    outs = [tmp_path / f"reader{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "helpers.cache_reader", url, str(cache_dir), str(limit), "3",
                               str(out)], env=env) for out in outs]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    reports = [json.loads(out.read_text()) for out in outs]
    ds = CorgiPileDataset(url, **OPTIONS)
    ds.set_epoch(3)
    want = {s["key"]: hashlib.sha256(s["data"]).hexdigest() for s in ds}
    pieces = sum(len(pieces) for pieces, _ in ds.plan())
    assert all(report["digests"] == want and report["refetches"] == 0 for report in reports)
    assert sum(report["fetches"] for report in reports) == pieces  # a piece one process fetched, the other found
    assert sum(report["remote_bytes"] for report in reports) == ds.storage.bytes_read


@pytest.mark.slow
def test_dataloader_workers_share_the_cache(url, local_pack, tmp_path):
    limit = pack_bytes(local_pack) // 2
    cached = CorgiPileDataset(url, **OPTIONS, cache=Cache(tmp_path, limit))
    plain = CorgiPileDataset(url, **OPTIONS)
    for epoch in range(2):
        for ds in (cached, plain):
            ds.set_epoch(epoch)
        got, want = ([(s["key"], s["data"]) for s in torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None,
                                                                                timeout=60)]
                     for ds in (cached, plain))
        assert sorted(got) == sorted(want) and len(got) == plain.manifest.num_samples
        assert 0 < folder_bytes(tmp_path) <= limit  # each write is accounted under the folder lock


@pytest.mark.slow
def test_resume_with_a_cache_continues_the_epoch(url, local_pack, tmp_path):
    options = {**OPTIONS, "cache": Cache(tmp_path, pack_bytes(local_pack) // 2)}
    first = CorgiPileDataset(url, **options)
    first.set_epoch(1)
    it = iter(first)
    head = [next(it)["key"] for _ in range(25)]
    state = first.state_dict()
    it.close()
    resumed = CorgiPileDataset(url, **options)
    resumed.load_state_dict(state)
    tail = [s["key"] for s in resumed]
    whole = CorgiPileDataset(url, **OPTIONS)
    whole.set_epoch(1)
    assert head + tail == [s["key"] for s in whole]


def test_a_local_pack_is_never_cached(local_pack, tmp_path):
    ds = CorgiPileDataset(local_pack, **OPTIONS, cache=Cache(tmp_path / "cache", 10**9))
    assert len(epoch_samples(ds, 0)) == ds.manifest.num_samples
    assert ds.last_reader.cache is None and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("options, message", [
    ({"folder": "x", "limit": 0}, "Cache limit"),
    ({"folder": 3, "limit": 100}, "Cache folder"),
    ({"folder": "x", "limit": 100, "policy": "fifo"}, "cache policy"),
])
def test_cache_arguments_are_checked(options, message):
    with pytest.raises(ArgumentError, match=message):
        Cache(**options)


def test_a_cache_takes_a_folder():  # and a limit, or a default one (tests/loaders/test_cache_limit.py)
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        Cache(limit=100)


def test_a_cache_is_a_cache_part(local_pack):
    with pytest.raises(ArgumentError, match="cache= takes Cache"):
        CorgiPileDataset(local_pack, cache="x")


@pytest.mark.slow
def test_a_blend_caches_its_remote_source_only_and_yields_the_uncached_blend(url, local_pack, tmp_path):
    sources = Blend({"remote": url, "local": local_pack}, weights={"remote": 0.5, "local": 0.5}, samples_per_epoch=90)
    limit = pack_bytes(local_pack) // 2
    plain = CorgiPileDataset(sources, **OPTIONS)
    cached = CorgiPileDataset(sources, **OPTIONS, cache=Cache(tmp_path, limit))
    remote = cached.packs.packs[0]
    for epoch in range(3):
        before = remote.storage.bytes_read
        assert [(s["source"], s["key"], s["data"]) for s in (plain.set_epoch(epoch) or plain)] == \
            [(s["source"], s["key"], s["data"]) for s in (cached.set_epoch(epoch) or cached)]
        remote_cache, local_reader = cached.last_reader.readers[0].cache, cached.last_reader.readers[1]
        remote_cache.wait_warm()  # the pieces are written in the background: count the folder once they are
        assert local_reader.cache is None and 0 < folder_bytes(tmp_path) <= limit
        assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1  # one folder: the remote pack's
        if epoch:  # the cache knows the blend's future: the remote source fetches less than it reads
            assert remote_cache.hits > 0 and remote.storage.bytes_read - before < pack_bytes(local_pack)

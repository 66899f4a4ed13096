"""CorgiPileDataset over HTTP: a real nginx (Range requests) serving packs; results equal the local read."""
from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pytest
import torch

from corgi_io.loaders import CorgiPileDataset, Ranks, Reading, Shuffle
from corgi_io.manifest import open_manifest
from corgi_io import PackOptions, pack
from corgi_io import CorruptDataError, StorageError
from corgi_io.storage.http import HttpStorage
from helpers.corpus_factory import make_image_corpus, write_text

pytestmark = pytest.mark.slow
FORMATS = ("wds", "tfrecord")


@pytest.fixture(scope="module")
def local_packs(tmp_path_factory):
    """fmt -> local pack of 41 images and texts, 5 samples per block, several shards."""
    root = tmp_path_factory.mktemp("http-corpus")
    make_image_corpus(root, 29, long_tail=True, seed=4)
    for i in range(12):
        write_text(root / "text" / f"t{i:02d}.txt", 3 + 9 * i, seed=i)
    out = {}
    for fmt in FORMATS:
        out[fmt] = tmp_path_factory.mktemp(f"http-local-{fmt}") / "pack"
        m = pack(root, out[fmt], PackOptions(format=fmt, block_samples=5, shard_bytes=40_000),
                 workers=1, overwrite=True, progress=False)
        assert m.num_samples == 41 and len(m.blocks) == 9 and len(m.shards) >= 3
    return out


def serve(http_root, local, name: str) -> str:
    """Copy a pack under the nginx root; return its URL."""
    directory, base_url = http_root
    shutil.copytree(local, directory / name, dirs_exist_ok=True)
    return f"{base_url.rstrip('/')}/{name}"


@pytest.fixture(scope="module")
def urls(http_root, local_packs):
    return {fmt: serve(http_root, path, f"loader-http-{fmt}") for fmt, path in local_packs.items()}


def pairs(ds):
    return [(s["key"], s["label"], s["size"], s["data"]) for s in ds]


@pytest.mark.parametrize("fmt", FORMATS)
def test_open_manifest_over_http_equals_the_local_one(local_packs, urls, fmt):
    remote, local = open_manifest(urls[fmt]), open_manifest(local_packs[fmt])
    assert remote.root == urls[fmt]
    assert (remote.format, remote.labels, remote.shards, remote.keys()) == \
           (local.format, local.labels, local.shards, local.keys())
    for a, b in ((remote.samples, local.samples), (remote.blocks, local.blocks)):
        assert set(a.arrays) == set(b.arrays)
        for name in a.arrays:
            np.testing.assert_array_equal(a.arrays[name], b.arrays[name])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["corgipile", "block", "window", "none", "full"])
def test_http_read_equals_the_local_read(local_packs, urls, fmt, mode):
    def run(source):
        ds = CorgiPileDataset(source, shuffle=Shuffle(mode, buffer_blocks=2), seed=3,
                              reading=Reading(prefetch_blocks=2))
        ds.set_epoch(1)
        return ds, pairs(ds)

    remote, got = run(urls[fmt])
    local, want = run(local_packs[fmt])
    assert isinstance(remote.storage, HttpStorage)  # the default for http(s)
    assert got == want and len(got) == remote.manifest.num_samples
    pieces = sum(len(p) for p, _ in remote.plan())
    assert remote.storage.reads == local.storage.reads == pieces
    assert pieces == (remote.manifest.num_samples if mode == "full" else len(remote.manifest.blocks))
    assert remote.storage.bytes_read == local.storage.bytes_read
    assert remote.storage.retried == 0


@pytest.mark.parametrize("world", [2, 3])
def test_http_ranks_equal_the_local_ranks(local_packs, urls, world):
    for rank in range(world):
        kw = dict(shuffle=Shuffle(buffer_blocks=2), seed=8, ranks=Ranks(rank=rank, world_size=world))
        remote = CorgiPileDataset(urls["tfrecord"], **kw)
        got = pairs(remote)
        assert got == pairs(CorgiPileDataset(local_packs["tfrecord"], **kw))
        assert len(got) == len(remote) == -(-41 // world)
        assert remote.storage.reads == sum(len(p) for p, _ in remote.plan())


def test_http_through_a_dataloader_with_worker_processes(local_packs, urls):
    """Worker processes open their own HTTP sessions after fork; same samples as locally."""
    def run(source):
        ds = CorgiPileDataset(source, shuffle=Shuffle(buffer_blocks=2), seed=6)
        ds.set_epoch(2)
        ds.manifest  # opened in the parent, used in the workers
        return [(s["key"], s["data"]) for s in
                torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None, timeout=60)]

    got = run(urls["wds"])
    assert got == run(local_packs["wds"]) and len(got) == 41
    # the main process can still read after the workers are gone
    assert pairs(CorgiPileDataset(urls["wds"], shuffle=Shuffle("none")))[0][3] == \
           pairs(CorgiPileDataset(local_packs["wds"], shuffle=Shuffle("none")))[0][3]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_missing_shard_over_http_fails_on_first_read_naming_the_url(http_root, local_packs, fmt):
    name = f"loader-http-missing-{fmt}"
    url = serve(http_root, local_packs[fmt], name)
    m = open_manifest(url)
    shard = m.shards[1].path
    (http_root[0] / name / shard).unlink()
    # no request per shard here
    ds = CorgiPileDataset(url, shuffle=Shuffle("none", buffer_blocks=1), reading=Reading(prefetch_blocks=1))
    got = []
    with pytest.raises(StorageError, match=f"{url}/{shard}"):
        for s in ds:
            got.append(s["key"])
    assert got == m.keys()[:m.shards[1].first_sample]


def test_a_truncated_shard_over_http_fails_while_reading_naming_the_url(http_root, local_packs):
    name = "loader-http-truncated"
    url = serve(http_root, local_packs["wds"], name)
    m = open_manifest(url)
    victim = http_root[0] / name / m.shards[-1].path
    victim.write_bytes(victim.read_bytes()[:100])
    ds = CorgiPileDataset(url, shuffle=Shuffle("none", buffer_blocks=1), reading=Reading(prefetch_blocks=1))
    got = []
    with pytest.raises(CorruptDataError, match=f"{url}/{m.shards[-1].path}"):
        for s in ds:
            got.append(s["key"])
    assert got == m.keys()[:m.shards[-1].first_sample]  # every intact shard, nothing of the truncated one


def test_an_epoch_rides_out_a_3_s_server_outage(http_server, http_root, local_packs):
    """nginx stops for 3 s mid-epoch, from another thread, and comes back: with the default
    retry budget the epoch completes with every sample exactly once, as read locally."""
    url = serve(http_root, local_packs["wds"], "loader-http-outage")
    # little read ahead: most blocks are read after the stop
    kw = dict(shuffle=Shuffle(buffer_blocks=1), reading=Reading(prefetch_blocks=1), seed=5)
    want = pairs(CorgiPileDataset(local_packs["wds"], **kw))
    ds = CorgiPileDataset(url, **kw)
    stopped = threading.Event()

    def outage():
        with http_server.down():
            stopped.set()
            time.sleep(3)

    server_thread, got, start = threading.Thread(target=outage), [], time.monotonic()
    try:
        for sample in ds:
            got.append((sample["key"], sample["label"], sample["size"], sample["data"]))
            if len(got) == 7:
                server_thread.start()
                assert stopped.wait(10)
    finally:
        if server_thread.ident is not None:
            server_thread.join()  # the server is back up for the other tests
    assert got == want and sorted(k for k, *_ in got) == sorted(ds.manifest.keys())
    assert ds.storage.retried > 0 and time.monotonic() - start >= 3  # the outage was met and waited out


def test_storage_options_set_the_retry_budget_of_the_reads(http_server, urls):
    ds = CorgiPileDataset(urls["tfrecord"], shuffle=Shuffle("none"),
                          reading=Reading(storage_options={"retry_seconds": 0.5, "backoff": 0.05}))
    with http_server.down():
        start = time.monotonic()
        with pytest.raises(StorageError, match=r"(size|read) failed after \d+ attempts in 0\.\d s: NewConnectionError"):
            pairs(ds)
        assert 0.5 <= time.monotonic() - start < 3


def test_verify_stops_with_a_storage_error_when_the_server_is_down(http_server, urls):
    """An unreachable server is no verdict on the pack: verify raises (one line) instead of listing every shard."""
    from corgi_io import verify

    m = open_manifest(urls["wds"])
    m.validate_rows()  # a remote manifest reads its rows on demand: read (and check) them while the server is up
    with http_server.down():
        with pytest.raises(StorageError, match=r"size failed after \d+ attempts") as info:
            verify(m, progress=False, storage_options={"retry_seconds": 0.3, "backoff": 0.05})
    assert urls["wds"] in str(info.value) and "\n" not in str(info.value)

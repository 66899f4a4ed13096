"""Faults of the cache of remote pieces (issue 28): a full cache disk never stops the reads (it stops caching and
warns once), a warm cache reads an epoch while the server is down, and a re-packed pack yields no stale byte; the
background writer (issue 31) never holds a read up, drops pieces when its queue is full, and a write that fails
stops the caching with one warning, each sample yielded once in every case.

The full disks are real ones (a small tmpfs: `helpers.small_disk`, root only, skipped elsewhere); the server is the
session's nginx (`http_server`), stopped for an outage with `http_server.down()`.
"""
from __future__ import annotations

import shutil
import threading
import time
import types
import warnings

import pytest
import torch

from corgi_io import CorruptDataError, PackOptions, open_manifest, pack
from corgi_io.loaders import Cache, CorgiPileDataset, Reading, Shuffle
from corgi_io.loaders.piece_cache import FINGERPRINT_CHARS, RemoteCache
from corgi_io.reading import PieceReader
from corgi_io.reading.piece_cache import PieceCache
from corgi_io.reading.read_checks import PieceVerifier
from corgi_io.schedule.eviction import CacheBook
from corgi_io.storage.cache_folder import CacheFolder
from corgi_io.storage.local import LocalStorage
from helpers.corpus_factory import write_text
from helpers.small_disk import small_disk

DISK = 1 << 20  # the small cache disk: 1 MiB
QUICK_RETRIES = {"retry_seconds": 2.0, "open_retry_seconds": 1.0}  # an outage fails in seconds, not 20 s


def make_pack(root, samples: int, words: int, block_samples: int, shard_bytes: int, seed: int = 0):
    """root/pack: `samples` texts of about `words` words each (their content fixed by `seed`)."""
    for i in range(samples):
        write_text(root / "corpus" / f"c{i % 2}" / f"t{i:03d}.txt", words + 7 * (i % 5), seed=seed * 1000 + i)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=block_samples, shard_bytes=shard_bytes),
         workers=1, overwrite=True, progress=False)
    return root / "pack"


@pytest.fixture(scope="module")
def big_pack(tmp_path_factory):
    """24 texts of about 60 KB in blocks of 4: six pieces of about 250 KB, 1.5 MB in all (more than DISK)."""
    return make_pack(tmp_path_factory.mktemp("full-cache"), 24, 10_000, 4, 400_000)


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory):
    """128 short texts in 16 blocks of 8 over several shards: two workers read whole blocks in every epoch."""
    return make_pack(tmp_path_factory.mktemp("warm-cache"), 128, 60, 8, 8_000)


def served(http_root, local_pack, name: str) -> str:
    """The URL of a copy of `local_pack` in the session server's folder."""
    directory, base_url = http_root
    shutil.rmtree(directory / name, ignore_errors=True)
    shutil.copytree(local_pack, directory / name)
    return f"{base_url.rstrip('/')}/{name}"


def read_epoch(ds, epoch: int, workers: int = 0, persistent: bool = False) -> list:
    """(index, key, data) of every sample of `epoch`, in the order yielded (main process, or DataLoader workers)."""
    ds.set_epoch(epoch)
    if not workers:
        return [(s["index"], s["key"], s["data"]) for s in ds]
    loader = torch.utils.data.DataLoader(ds, num_workers=workers, batch_size=None, timeout=60,
                                         persistent_workers=persistent)
    return [(s["index"], s["key"], s["data"]) for s in loader]


def truth(local_pack, epoch: int = 0) -> list:
    """The epoch's samples read from the local pack, sorted by index: what any read of it must yield."""
    return sorted(read_epoch(CorgiPileDataset(local_pack), epoch))


def temporary_files(folder) -> list:
    return [path.name for path in folder.rglob(".*.tmp-*")]


class RemoteLooking(LocalStorage):
    """Local files offered only through ranged reads, as a remote store offers them (no `local_path`)."""

    def local_path(self, relpath: str):
        return None


def block_pieces(manifest) -> list:
    first, count = manifest.blocks.first, manifest.blocks.count
    return [(b, int(first[b]), int(first[b] + count[b])) for b in range(len(first))]


def read_through(cache, manifest, storage, pieces) -> list:
    """Each piece's bytes, read through `cache` with the storage's ranged read as its fetch, once the cache's
    writer has written what they left it."""
    reader = PieceReader(manifest, storage)
    got = [cache.read(piece, lambda piece=piece: storage.read_range(*reader.byte_range(piece))) for piece in pieces]
    cache.writer.flush()
    return got


def one_warning(caught, folder) -> None:
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1, texts
    assert str(folder) in texts[0] and "cache disk full" in texts[0] and "\n" not in texts[0]


# --- a full cache disk ------------------------------------------------------------------------------------------

def test_pieces_fetched_onto_a_full_disk_are_read_on_and_it_warns_once(big_pack, tmp_path):
    manifest, storage = open_manifest(big_pack), RemoteLooking(str(big_pack))
    pieces = block_pieces(manifest)
    want = [storage.read_range(*PieceReader(manifest, storage).byte_range(piece)) for piece in pieces]
    with small_disk(tmp_path / "disk", DISK) as disk, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a second warning would show, not be folded into the first
        cache = PieceCache(CacheFolder(disk / "pack"), CacheBook("belady", 100 * DISK),
                           PieceVerifier(manifest, storage))
        cache.plan(pieces + pieces)
        assert read_through(cache, manifest, storage, pieces) == want
        kept = cache.folder.sizes()
        assert read_through(cache, manifest, storage, pieces) == want  # the kept pieces are read back
        assert 0 < len(kept) < len(pieces) and not cache.writing
        assert cache.hits == len(kept) and cache.fetches == 2 * len(pieces) - len(kept)
        assert temporary_files(disk) == []  # the failed write left nothing behind
    one_warning(caught, disk / "pack")


def test_a_disk_out_of_inodes_reads_without_piece_locks(big_pack, tmp_path):
    """Three inodes: the disk's root, the cache folder and its folder lock; no piece lock can be made."""
    manifest, storage = open_manifest(big_pack), RemoteLooking(str(big_pack))
    pieces = block_pieces(manifest)[:3]
    with small_disk(tmp_path / "disk", DISK, inodes=3) as disk, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = PieceCache(CacheFolder(disk / "pack"), CacheBook("lru", 100 * DISK), PieceVerifier(manifest, storage))
        with cache.folder.accounting():
            pass
        got = read_through(cache, manifest, storage, pieces)
        assert got == [storage.read_range(*PieceReader(manifest, storage).byte_range(p)) for p in pieces]
        assert cache.fetches == len(pieces) and not cache.writing and cache.folder.sizes() == {}
    one_warning(caught, disk / "pack")


def test_a_cache_folder_a_full_disk_cannot_hold_means_no_cache(big_pack, tmp_path):
    manifest, storage = open_manifest(big_pack), RemoteLooking(str(big_pack))
    with small_disk(tmp_path / "disk", DISK, inodes=1) as disk, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = types.SimpleNamespace(cache_dir=str(disk), cache_policy="belady", cache_limit=DISK)
        assert RemoteCache(spec).for_reading(manifest, storage, "ab" * 16) is None
    one_warning(caught, disk / ("ab" * 16)[:FINGERPRINT_CHARS])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_full_cache_disk_does_not_stop_the_epoch(http_root, big_pack, tmp_path, workers):
    url = served(http_root, big_pack, "cache-faults-full")
    want = truth(big_pack)
    with small_disk(tmp_path / "disk", DISK) as disk, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = CorgiPileDataset(url, shuffle=Shuffle(buffer_blocks=2), seed=3,
                              reading=Reading(storage_options=QUICK_RETRIES), cache=Cache(disk, 100 * DISK))
        for epoch in range(2):  # the second reads what the first could keep, fetches the rest, and stops again
            assert sorted(read_epoch(ds, epoch, workers)) == want  # each sample once, with its packed bytes
        assert temporary_files(disk) == []
    if not workers:  # the workers' warnings go to their own stderr
        one_warning(caught, disk / ds.packs.fingerprint[:FINGERPRINT_CHARS])
        assert ds.last_reader.cache.hits > 0


# --- a warm cache and a server that is down -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("workers, persistent", [
    (0, False),
    (2, True),
    (2, False),  # fresh workers: the row groups come from the cache folder's kept ones (`RowGroups.share`)
])
def test_a_warm_cache_reads_an_epoch_while_the_server_is_down(http_server, http_root, small_pack, tmp_path,
                                                              workers, persistent):
    url = served(http_root, small_pack, "cache-faults-warm")
    ds = CorgiPileDataset(url, shuffle=Shuffle(buffer_blocks=2), seed=3,
                          reading=Reading(prefetch_blocks=2, storage_options=QUICK_RETRIES),
                          cache=Cache(tmp_path, 10**9))
    loader = torch.utils.data.DataLoader(ds, num_workers=workers, batch_size=None, timeout=60,
                                         persistent_workers=persistent) if workers else ds
    ds.set_epoch(0)
    assert sorted((s["index"], s["key"], s["data"]) for s in loader) == truth(small_pack, 0)
    with http_server.down():
        started = time.monotonic()
        ds.set_epoch(1)
        got = sorted((s["index"], s["key"], s["data"]) for s in loader)
        print(f"epoch 1 with the server down: {time.monotonic() - started:.3f} s")
    assert got == truth(small_pack, 1)


# --- a re-packed pack under the same URL ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_repacked_pack_under_the_same_url_yields_no_stale_byte(http_root, small_pack, tmp_path):
    url = served(http_root, small_pack, "cache-faults-repack")
    old = CorgiPileDataset(url, shuffle=Shuffle(buffer_blocks=2), seed=3, cache=Cache(tmp_path / "cache", 10**9))
    assert sorted(read_epoch(old, 0)) == truth(small_pack)
    old.last_reader.cache.wait_warm()  # every piece is written (in the background) before the folder is copied
    repacked = make_pack(tmp_path / "repack", 128, 60, 8, 8_000, seed=1)  # other texts, same shard names
    served(http_root, repacked, "cache-faults-repack")
    new = CorgiPileDataset(url, shuffle=Shuffle(buffer_blocks=2), seed=3, cache=Cache(tmp_path / "cache", 10**9))
    # the worst case: the new pack's folder holds the old pack's pieces under the same names
    folders = [tmp_path / "cache" / ds.packs.fingerprint[:FINGERPRINT_CHARS] for ds in (old, new)]
    if folders[1] != folders[0]:
        shutil.copytree(folders[0], folders[1])
    assert sorted(read_epoch(new, 0)) == truth(repacked)
    cache, pieces = new.last_reader.cache, sum(len(pieces) for pieces, _ in new.plan())
    cache.wait_warm()  # the next epoch's warm-up may still wait on a piece this epoch fetched: count once it is done
    assert cache.hits == 0 and cache.refetches == cache.fetches == pieces  # every old piece failed its check
    # the old dataset still holds the old manifest: a fetch meets the new shards and fails, it never mixes them in
    for path in folders[0].iterdir():
        if not path.name.startswith("."):
            path.unlink()
    with pytest.raises(CorruptDataError, match="shard is .* bytes, the manifest says|mismatch"):
        read_epoch(old, 1)


# --- the background writer (issue 31): never on the read path, never a lost or repeated sample --------------------

def test_a_prefetch_that_waits_for_a_piece_being_fetched_fetches_nothing_and_counts_no_hit(small_pack, tmp_path,
                                                                                          monkeypatch):
    """A read holds its piece's lock until the writer has written it; the next epoch's warm-up, started meanwhile,
    finds the piece not yet in the folder, waits on the lock, then finds the fresh copy: it fetches nothing and counts
    no hit (it served no read; counting it made the re-packed pack's test above fail one run in three)."""
    manifest, storage = open_manifest(small_pack), RemoteLooking(str(small_pack))
    piece = block_pieces(manifest)[0]
    where = PieceReader(manifest, storage).byte_range(piece)
    in_fetch, release, warm_waits, fetched = threading.Event(), threading.Event(), threading.Event(), []
    real_fetching = CacheFolder.fetching

    def fetching(folder, key):
        if threading.current_thread().name == "corgi-cache-warm":
            warm_waits.set()  # it asks for the lock the read holds: it waits until the piece is written
        return real_fetching(folder, key)

    def fetch(gate=None):
        in_fetch.set()
        if gate is not None:
            gate.wait(10)
        fetched.append(piece)
        return storage.read_range(*where)

    monkeypatch.setattr(CacheFolder, "fetching", fetching)
    cache = new_cache(small_pack, tmp_path / "cache")
    cache.plan([piece, piece])
    reading = threading.Thread(target=cache.read, args=(piece, lambda: fetch(release)))
    reading.start()
    assert in_fetch.wait(10)
    cache.warm([(piece, where[2], fetch)])
    assert warm_waits.wait(10)
    release.set()
    reading.join(10)
    cache.wait_warm()
    assert fetched == [piece] and cache.fetches == 1 and cache.hits == 0 and cache.refetches == 0
    assert cache.read(piece, fetch) == storage.read_range(*where) and cache.hits == 1  # a read of the plan is a hit


def epoch_through_cache(local_pack, cache) -> list:
    """(index, key, data) of every sample of epoch 0's plan, read through `cache` from remote-looking storage."""
    manifest, storage = open_manifest(local_pack), RemoteLooking(str(local_pack))
    plan = list(CorgiPileDataset(local_pack, shuffle=Shuffle(buffer_blocks=2), seed=3).plan())
    cache.plan([tuple(piece) for pieces, _ in plan for piece in pieces.tolist()])
    reader = PieceReader(manifest, storage, prefetch_pieces=4, read_threads=2, cache=cache)
    return [(s["index"], s["key"], bytes(s["data"])) for s in reader.samples(plan)]


def new_cache(local_pack, folder) -> PieceCache:
    manifest, storage = open_manifest(local_pack), RemoteLooking(str(local_pack))
    return PieceCache(CacheFolder(folder), CacheBook("belady", 10**9), PieceVerifier(manifest, storage))


def test_an_epoch_does_not_wait_for_the_cache_writes_and_a_full_queue_drops_pieces(small_pack, tmp_path, monkeypatch):
    """Every write waits until the epoch has been read (or 1 s): the epoch ends first, the writer's queue fills and
    the pieces past it are not cached, and each sample is yielded once; the next epoch reads the kept pieces back."""
    epoch_read, written_during = threading.Event(), []
    real_write = CacheFolder.write

    def slow_write(folder, key, data):
        epoch_read.wait(1.0)
        written_during.append(not epoch_read.is_set())
        real_write(folder, key, data)

    monkeypatch.setattr(CacheFolder, "write", slow_write)
    cache = new_cache(small_pack, tmp_path / "cache")
    cache.writer.capacity = 1  # bytes: one piece waits at a time (the queue of 64 MiB would take this whole pack)
    got = epoch_through_cache(small_pack, cache)
    epoch_read.set()
    cache.wait_warm()
    assert sorted(got) == truth(small_pack)
    assert not any(written_during)  # no write finished while the epoch was read: none held it up
    pieces = len(block_pieces(open_manifest(small_pack)))
    assert cache.writer.dropped > 0 and len(cache.folder.sizes()) == pieces - cache.writer.dropped
    assert cache.fetches == pieces and temporary_files(tmp_path) == []
    again = new_cache(small_pack, tmp_path / "cache")
    assert sorted(epoch_through_cache(small_pack, again)) == truth(small_pack)
    again.wait_warm()  # its writes end here, not in the next test
    assert again.hits == pieces - cache.writer.dropped and again.fetches == cache.writer.dropped


@pytest.mark.parametrize("error", [PermissionError(13, "Permission denied"), RuntimeError("a bug")])
def test_a_failing_cache_write_stops_caching_with_one_warning_and_loses_no_sample(small_pack, tmp_path,
                                                                                monkeypatch, error):
    def failing_write(folder, key, data):
        raise error

    monkeypatch.setattr(CacheFolder, "write", failing_write)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = new_cache(small_pack, tmp_path / "cache")
        got = epoch_through_cache(small_pack, cache)
        cache.wait_warm()
    assert sorted(got) == truth(small_pack) and not cache.writing and cache.folder.sizes() == {}
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1 and str(tmp_path / "cache") in texts[0] and "cache write failed" in texts[0], texts
    assert str(error.args[-1]) in texts[0] and "\n" not in texts[0]

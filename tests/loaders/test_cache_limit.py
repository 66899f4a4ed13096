"""`Cache(folder)` without a limit (issue 31): half the free space of the folder's file system, at most
`DEFAULT_CACHE_CAP`, said in one warning naming the folder and the limit; a wrong limit's error names the cache."""
from __future__ import annotations

import os
import warnings

import pytest

from corgi_io.errors import ArgumentError
from corgi_io.loaders import Cache, CorgiPileDataset
from corgi_io.loaders.options import DEFAULT_CACHE_CAP


def made_quietly(*args, **kwargs) -> tuple:
    """(the Cache, the texts of the warnings its making gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = Cache(*args, **kwargs)
    return cache, [str(w.message) for w in caught]


def test_a_cache_without_a_limit_takes_half_the_free_space_and_says_so_once(tmp_path):
    folder = tmp_path / "not" / "made" / "yet"
    cache, texts = made_quietly(folder)
    disk = os.statvfs(tmp_path)
    half = disk.f_bavail * disk.f_frsize // 2
    assert abs(cache.limit - min(half, DEFAULT_CACHE_CAP)) <= 64 << 20  # the free space moves a little meanwhile
    assert len(texts) == 1 and "\n" not in texts[0], texts
    assert str(folder) in texts[0] and str(cache.limit) in texts[0] and "half the free space" in texts[0]
    assert not folder.exists()  # nothing is made before a remote pack is read


def test_the_default_limit_is_capped(tmp_path, monkeypatch):
    huge = os.statvfs_result((4096, 4096, 1 << 40, 1 << 40, 1 << 40, 0, 0, 0, 0, 255))  # 4 PiB free
    monkeypatch.setattr(os, "statvfs", lambda path: huge)
    assert made_quietly(tmp_path)[0].limit == DEFAULT_CACHE_CAP


def test_a_cache_with_a_limit_says_nothing(tmp_path):
    assert made_quietly(tmp_path, 10**9) == (Cache(tmp_path, 10**9), [])


def test_the_dataset_carries_the_default_limit(tmp_path, local_pack_for_limit):
    cache, _ = made_quietly(tmp_path / "cache")
    ds = CorgiPileDataset(local_pack_for_limit, cache=cache)
    assert ds.spec.cache_dir == str(tmp_path / "cache") and ds.spec.cache_limit == cache.limit


@pytest.mark.parametrize("limit, message", [
    ("x", "Cache limit (bytes) must be an int >= 1 or None, got 'x'"),
    (0, "Cache limit (bytes) must be >= 1 or None, got 0"),
    (2.5e9, "Cache limit (bytes) must be an int >= 1 or None, got 2500000000.0"),
])
def test_a_wrong_limit_names_the_cache(tmp_path, limit, message):
    with pytest.raises(ArgumentError) as caught:
        Cache(tmp_path, limit)
    assert str(caught.value) == message


@pytest.fixture(scope="module")
def local_pack_for_limit(tmp_path_factory):
    from corgi_io import PackOptions, pack
    from helpers.corpus_factory import write_text

    root = tmp_path_factory.mktemp("cache-limit")
    for i in range(8):
        write_text(root / "corpus" / "c0" / f"t{i}.txt", 20, seed=i)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=4), workers=1, progress=False)
    return root / "pack"

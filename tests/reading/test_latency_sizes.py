"""Over HTTP a shard's size comes from its first read's Content-Range, not from a HEAD before it (issue 31 §2: a
round trip fewer before each process's first piece), and a shard that changed size still fails in one line."""
from __future__ import annotations

import shutil

import pytest

from corgi_io import CorruptDataError
from corgi_io.loaders import CorgiPileDataset, Reading, Shuffle
from corgi_io.manifest import open_manifest
from helpers.packs import small_image_pack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_pack(tmp_path_factory):
    return small_image_pack(tmp_path_factory.mktemp("latency-sizes"))


def serve(http_server, pack, name: str) -> str:
    shutil.copytree(pack, http_server.root / name)
    return http_server.url + name


def keys_of(url: str):
    ds = CorgiPileDataset(url, shuffle=Shuffle("none", buffer_blocks=1), reading=Reading(prefetch_blocks=1))
    return (sample["key"] for sample in ds)


def test_an_epoch_over_http_asks_no_shard_size(http_server, local_pack):
    url = serve(http_server, local_pack, "latency-sizes-whole")
    since = len(http_server.requests())
    assert sorted(keys_of(url)) == sorted(open_manifest(local_pack).keys())
    logged = [r for r in http_server.requests()[since:] if r[1].startswith("/latency-sizes-whole/")]  # shared server
    assert [r for r in logged if r[0] == "HEAD"] == []
    assert sum(1 for r in logged if "/shard-" in r[1]) == len(open_manifest(local_pack).blocks)


@pytest.mark.parametrize("change, keep", [("truncated", 100), ("truncated", 0), ("grown", None)])
def test_a_shard_that_changed_size_fails_in_one_line_naming_it(http_server, local_pack, change, keep):
    url = serve(http_server, local_pack, f"latency-sizes-{change}-{keep}")
    m = open_manifest(url)
    victim = http_server.root / f"latency-sizes-{change}-{keep}" / m.shards[-1].path
    data = victim.read_bytes()
    victim.write_bytes(data[:keep] if keep is not None else data + b"\0" * 512)
    got = []
    with pytest.raises(CorruptDataError, match=rf"^{url}/{m.shards[-1].path}: byte offset \d+: shard is \d+ bytes, "
                                               rf"the manifest says {len(data)} \({change} or replaced\)$"):
        for key in keys_of(url):
            got.append(key)
    assert got == m.keys()[:m.shards[-1].first_sample]  # every intact shard, nothing of the changed one

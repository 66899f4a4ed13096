"""Start-up costs O(1) requests per rank, whatever the pack's size (issue 31 §1), counted in nginx's access log.

Packs of 10-byte texts (blocks of 1024 samples), served by nginx.  Each rank is a fresh `CorgiPileDataset` taking
one batch of 32: before it, at most 8 metadata requests (the head, the block table, row groups, HEADs) and at
most 4 MiB of metadata, the same at 2*10^4 and 10^5 samples, for W = 8 and W = 64; over a whole epoch, at most
8 metadata requests beside the shard reads.
"""
from __future__ import annotations

import shutil

import pytest

from corgi_io.loaders import Batches, CorgiPileDataset, Ranks
from corgi_io.packing import PackOptions, pack
from helpers.source_shards import text_tar

pytestmark = pytest.mark.slow

METADATA_REQUESTS, METADATA_BYTES = 8, 4 << 20


@pytest.fixture(scope="module", params=[20_000, 100_000], ids=["2e4", "1e5"])
def served(request, tmp_path_factory, http_server):
    """(URL of a pack of `param` 10-byte texts served by nginx, its path under the served folder)."""
    n = request.param
    work = tmp_path_factory.mktemp(f"startup-{n}")
    text_tar(work / "src.tar", n)
    pack(work / "src.tar", work / "pack", PackOptions(), workers=1, progress=False)
    name = f"startup-{n}"
    shutil.copytree(work / "pack", http_server.root / name)
    return http_server.url + name, f"/{name}/"


def requests_of(http_server, since: int, prefix: str) -> tuple:
    """(metadata requests, metadata bytes, shard requests) nginx logged after its first `since` requests."""
    logged = [r for r in http_server.requests()[since:] if r[1].startswith(prefix)]
    metadata = [r for r in logged if not r[1].rsplit("/", 1)[-1].startswith("shard-")]
    return len(metadata), sum(r[3] for r in metadata), len(logged) - len(metadata)


@pytest.mark.parametrize("world_size", [8, 64])
def test_a_rank_makes_a_few_metadata_requests_before_its_first_batch(served, http_server, world_size):
    url, prefix = served
    for rank in (0, world_size - 1):
        since = len(http_server.requests())
        ds = CorgiPileDataset(url, ranks=Ranks(rank=rank, world_size=world_size), batching=Batches(32))
        batch = next(iter(ds))
        assert len(batch["data"]) == 32
        requests, nbytes, shard_reads = requests_of(http_server, since, prefix)
        assert requests <= METADATA_REQUESTS and nbytes <= METADATA_BYTES, (rank, requests, nbytes)
        assert shard_reads >= 1


def test_over_a_whole_epoch_a_rank_makes_at_most_its_piece_reads_and_8_more_requests(served, http_server):
    url, prefix = served
    since = len(http_server.requests())
    ds = CorgiPileDataset(url, ranks=Ranks(rank=0, world_size=8), batching=Batches(32))
    samples = sum(len(batch["data"]) for batch in ds)
    logged = [r for r in http_server.requests()[since:] if r[1].startswith(prefix)]
    pieces = sum(1 for method, path, _, _ in logged if method == "GET" and "/shard-" in path)
    assert abs(samples - ds.manifest.num_samples / 8) <= 32  # the rank's share, in batches of 32
    assert pieces >= len(ds.manifest.blocks) // 8 and len(logged) <= pieces + METADATA_REQUESTS, logged


def test_the_ranks_of_a_node_with_one_cache_folder_fetch_each_row_group_once(served, http_server, tmp_path):
    from corgi_io.loaders import Cache

    url, prefix = served
    since = len(http_server.requests())
    for rank in range(4):  # four ranks of one node, reading with one cache folder
        ds = CorgiPileDataset(url, ranks=Ranks(rank=rank, world_size=4), batching=Batches(32),
                              cache=Cache(tmp_path / "node-cache", 10**9))
        assert sum(len(batch["data"]) for batch in ds) > 0
    row_fetches = [r for r in http_server.requests()[since:] if r[1] == f"{prefix}columns/rows.bin"]
    groups = len(list((tmp_path / "node-cache").glob("*-rows/*.rows")))
    assert groups == len(ds.manifest.blocks)
    # these packs' groups fit in one fetch, which brings them all: alone, each rank would fetch rows.bin whole
    assert sum(r[3] for r in row_fetches) <= 1.2 * ds.manifest.rows_bytes, (row_fetches, ds.manifest.rows_bytes)

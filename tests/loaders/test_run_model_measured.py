"""`corgi plan --simulate`'s remote bytes and cache hits against the loader's own counters: a pack over HTTP, read
through a cache of half its bytes for three epochs in one process (bench/simulate.py does the same with workers,
a latency proxy and the wall time)."""
from __future__ import annotations

import shutil

import pytest

from corgi_io.loaders import Cache, CorgiPileDataset, Shuffle
from corgi_io.manifest import open_manifest
from corgi_io.report.plan import price_run
from corgi_io.schedule.run_model import RunModel
from helpers.packs import image_pack

EPOCHS, BUFFER = 3, 4


@pytest.mark.slow
def test_remote_bytes_and_hits_per_epoch_are_the_loaders(tmp_path_factory, tmp_path, http_root):
    local = image_pack(tmp_path_factory, "priced", 96, block_samples=4)  # 24 blocks
    directory, base_url = http_root
    shutil.copytree(local, directory / "priced")
    m = open_manifest(local)
    limit = int(m.blocks.length.sum()) // 2
    ds = CorgiPileDataset(f"{base_url.rstrip('/')}/priced", seed=0, shuffle=Shuffle(buffer_blocks=BUFFER),
                          cache=Cache(tmp_path / "cache", limit))
    measured = []
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        before = ds.storage.bytes_read
        hits = ds.last_reader.cache.hits if ds.last_reader else 0
        assert sum(1 for _ in ds) == 96
        ds.last_reader.cache.wait_warm()  # its prefetch of the next epoch counts in this one
        measured.append((ds.storage.bytes_read - before, (ds.last_reader.cache.hits - hits) / 24))
    run = price_run(m.blocks, m.samples, RunModel(cache_bytes=limit), world_size=1, buffer_blocks=BUFFER,
                    epochs=EPOCHS)
    predicted = [(e["remote_bytes"], e["hit_rate"]) for e in run["epochs"]]
    for (got, got_hits), (guess, guess_hits) in zip(measured, predicted):  # equal in the runs here; a block is 4%
        assert guess == pytest.approx(got, rel=0.05) and guess_hits == pytest.approx(got_hits, abs=0.05)
    assert sum(got for got, _ in measured) < EPOCHS * 2 * limit  # the cache did keep pieces

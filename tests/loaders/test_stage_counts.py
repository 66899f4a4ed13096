"""Counts the profile builds on (issue 32 review): a transform is one call a sample, and a pass stopped early still
brings every read it made to the board."""
from __future__ import annotations

import threading
import time

import pytest

from corgi_io.loaders import Batches, CorgiPileDataset, Reading, Shuffle
from helpers.packs import small_image_pack


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    return str(small_image_pack(tmp_path_factory.mktemp("stage-counts")))


def test_a_transform_without_a_decoder_is_one_call_a_sample(pack):
    ds = CorgiPileDataset(pack, transform=lambda data: data, reading=Reading(timing="stages"))
    assert sum(1 for _ in ds) == len(ds)
    assert ds.stats.snapshot()["total"]["transform"]["calls"] == len(ds)


def test_a_pass_stopped_early_brings_every_read_it_made_to_the_board(pack, monkeypatch):
    """The loop takes one batch and stops (a `break`, or corgi profile's --batches): reads still in flight end and
    are counted before the pass's last flush, not left in a clock that nobody flushes again."""
    ds = CorgiPileDataset(pack, batching=Batches(4), reading=Reading(threads=8, prefetch_blocks=8, timing="stages"),
                          shuffle=Shuffle(buffer_blocks=1))
    storage, reads, lock = type(ds.storage), [0], threading.Lock()
    for name in ("read_range", "read_range_into"):
        original = getattr(storage, name)

        def slow(self, *args, _original=original):
            time.sleep(0.03)
            with lock:
                reads[0] += 1
            return _original(self, *args)
        monkeypatch.setattr(storage, name, slow)
    batches = iter(ds.stats.watch(ds))
    next(batches)
    batches.close()
    assert reads[0] > 1 and ds.stats.snapshot()["total"]["storage"]["calls"] == reads[0]

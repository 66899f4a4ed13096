"""A worker's pooled shared memory: a batch over it crosses as a lease, and the worker takes the memory again only
once the receiver holds nothing of it (the batch, a row, its numpy array), never while it does."""
from __future__ import annotations

import gc
import os
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder
from corgi_io.loaders import shared_memory
from corgi_io.loaders.collate import Batch
from corgi_io.loaders.shared_memory import SharedBuffers

SHAPE = (4, 256, 256, 3)  # large enough to cross through shared memory (collate.INLINE_BYTES)


def fresh_pool(monkeypatch) -> SharedBuffers:
    """This process's pool (the one batches are leased from), emptied for the test."""
    monkeypatch.setattr(shared_memory.WORKER_BUFFERS, "buffers", [])
    return shared_memory.WORKER_BUFFERS


def filled(pool: SharedBuffers, value: int) -> torch.Tensor:
    tensor = pool.tensor(SHAPE)
    tensor.fill_(value)
    return tensor


def sent(batch: Batch) -> bytes:
    return bytes(ForkingPickler.dumps(batch))


@pytest.mark.parametrize("hold", ["batch", "row", "numpy"])
def test_the_pool_takes_a_buffer_again_only_once_the_receiver_holds_nothing_of_it(monkeypatch, hold):
    pool = fresh_pool(monkeypatch)
    first = filled(pool, 7)
    pointer, pickled = first.data_ptr(), sent(Batch(data=first))
    del first
    assert filled(pool, 1).data_ptr() != pointer  # sent, not yet received
    received = ForkingPickler.loads(pickled)["data"]
    kept = {"batch": received, "row": received[2], "numpy": received.numpy()}[hold]
    del received
    gc.collect()
    assert filled(pool, 2).data_ptr() != pointer  # the receiver still holds part of it
    assert (np.asarray(kept) == 7).all()
    del kept
    assert filled(pool, 3).data_ptr() == pointer
    assert len(pool.buffers) <= SharedBuffers.KEEP


def test_a_leased_batch_arrives_equal_with_its_aliases_one_tensor_and_other_tensors_as_they_were(monkeypatch):
    pool = fresh_pool(monkeypatch)
    images = filled(pool, 5)[1:4]  # a view at an offset
    other = torch.arange(300_000, dtype=torch.int32)  # too large to travel inline, not from the pool
    received = ForkingPickler.loads(sent(Batch(data=images, image=images, other=other)))
    assert torch.equal(received["data"], images) and received["image"] is received["data"]
    assert torch.equal(received["other"], other)
    assert pool.lease(other) is None and pool.lease(images).offset == images.storage_offset()
    small = torch.arange(10)  # travels inline
    received = ForkingPickler.loads(sent(Batch(data=small, label=small)))
    assert torch.equal(received["data"], small) and received["label"] is received["data"]


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    from helpers.packs import image_pack

    return image_pack(tmp_path_factory, "lease-pack", 48)


def received_inodes(monkeypatch) -> list:
    """The shared-memory file of every lease the main process receives, in order (workers pickle the patched
    function by its name, which the main process resolves to the same)."""
    inodes, receive = [], shared_memory._received_lease

    def recording(whole, *view):
        inodes.append(os.fstat(whole.untyped_storage()._share_fd_cpu_()[0]).st_ino)
        return receive(whole, *view)

    recording.__qualname__ = recording.__name__ = "_received_lease"
    recording.__module__ = shared_memory.__name__
    monkeypatch.setattr(shared_memory, "_received_lease", recording)
    return inodes


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("hold", [False, True])
def test_worker_batches_stay_intact_while_held_and_their_memory_is_reused_once_dropped(jpegs, monkeypatch, hold):
    inodes = received_inodes(monkeypatch)
    ds = CorgiPileDataset(jpegs, seed=4, batching=Batches(4), decode=ImageDecoder(size=(256, 320)))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=60, persistent_workers=True)
    held, batches = [], 0
    for epoch in range(2):
        ds.set_epoch(epoch)
        for batch in loader:
            images, batches = batch["data"], batches + 1
            if hold:  # the batch, a row of another and the numpy array of a third, each beside its copy
                kept = {0: images, 1: images[1], 2: images.numpy()}[batches % 3]
                held.append((kept, kept.copy() if isinstance(kept, np.ndarray) else kept.clone()))
            del batch, images
    assert batches == 2 * 48 // 4 and len(inodes) == batches
    if hold:
        assert all(np.array_equal(np.asarray(kept), np.asarray(copy)) for kept, copy in held)
        assert len(set(inodes)) == batches  # nothing held was written again
    else:
        assert len(set(inodes)) <= 2 * 4  # each worker: the batches in flight (prefetch 2) and the one being filled

"""to_device: on CPU a transparent pass-through (batches, len, state and resume unchanged); the one-batch-ahead
path that CUDA uses hands out the loader's state as of each batch, so a resume from it loses nothing; with CUDA,
the batches arrive on the device equal to the host's."""
from __future__ import annotations

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io.loaders import Batch, Batches, CorgiPileDataset, PackedBytes, to_device
from corgi_io.loaders.device import _moved
from helpers.packs import text_pack


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return text_pack(tmp_path_factory, "device", [3 + i % 7 for i in range(60)])


def loader(root):
    ds = CorgiPileDataset(root, batching=Batches(4), seed=2)
    ds.set_epoch(1)
    return StatefulDataLoader(ds, batch_size=None)


def keys(batches) -> list:
    return [list(batch["key"]) for batch in batches]


def test_on_cpu_batches_and_len_pass_through_unchanged(packed):
    plain, wrapped = loader(packed), to_device(loader(packed), "cpu")
    assert len(wrapped) == len(plain) == 15
    got, want = list(wrapped), list(plain)
    assert keys(got) == keys(want)
    assert all(torch.equal(g["label"], w["label"]) and g["data"].buffer == w["data"].buffer for g, w in zip(got, want))


@pytest.mark.parametrize("ahead", [False, True])
def test_a_state_taken_through_the_wrapper_resumes_at_the_next_batch(packed, ahead):
    whole = keys(loader(packed))
    wrapped = to_device(loader(packed), "cpu")
    batches = wrapped._one_ahead(lambda b: b, lambda b: None) if ahead else iter(wrapped)  # CUDA's path, or CPU's
    head = [list(next(batches)["key"]) for _ in range(5)]
    state = wrapped.state_dict()  # after 5 batches handed out, whatever was read ahead
    resumed = to_device(loader(packed), "cpu")
    resumed.load_state_dict(state)
    assert head + keys(resumed) == whole


def test_moving_keeps_the_batch_structure_and_leaves_non_tensors_alone():
    batch = Batch(data=torch.arange(6).reshape(2, 3), key=["a", "b"], raw=PackedBytes.pack([b"x", b"yz"]),
                  pair=(torch.ones(2), "tag"))
    moved = _moved(batch, torch.device("cpu"), pin_memory=False)
    assert isinstance(moved, Batch) and moved["key"] == ["a", "b"] and moved["raw"] is batch["raw"]
    assert torch.equal(moved["data"], batch["data"]) and moved["pair"][1] == "tag"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CI has none)")
def test_on_cuda_batches_arrive_on_the_device_equal_to_the_hosts(packed):
    want = list(loader(packed))
    got = list(to_device(loader(packed), "cuda"))
    assert keys(got) == keys(want)
    assert all(g["label"].is_cuda and torch.equal(g["label"].cpu(), w["label"]) for g, w in zip(got, want))

"""Faults found in review of the leased batch memory (`corgi_io.loaders.shared_memory`)."""
from __future__ import annotations

import gc
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

from corgi_io.loaders import Batches, CorgiPileDataset, Decoding, ImageDecoder, Shuffle
from corgi_io.loaders import shared_memory
from corgi_io.loaders.collate import Batch, collate_samples

SHAPE = (4, 512, 512, 3)  # each row above collate.INLINE_BYTES: a lease, not inline


def fresh_pool(monkeypatch):
    monkeypatch.setattr(shared_memory.WORKER_BUFFERS, "buffers", [])
    return shared_memory.WORKER_BUFFERS


def test_two_views_of_one_buffer_in_a_batch_keep_it_until_both_are_dropped(monkeypatch):
    pool = fresh_pool(monkeypatch)
    images = pool.tensor(SHAPE)
    images.fill_(7)
    pointer = images.data_ptr()
    pickled = bytes(ForkingPickler.dumps(Batch(data=images, pixels=images.permute(0, 3, 1, 2))))
    del images
    received = ForkingPickler.loads(pickled)
    pixels = received["pixels"]
    del received  # the batch and its "data" view are gone; "pixels" is still held
    gc.collect()
    again = pool.tensor(SHAPE)
    again.fill_(1)
    assert again.data_ptr() != pointer
    assert (pixels == 7).all()


def test_two_leases_of_one_buffer_received_apart_keep_it_until_both_are_dropped(monkeypatch):
    pool = fresh_pool(monkeypatch)
    images = pool.tensor(SHAPE)
    images.fill_(7)
    pointer = images.data_ptr()
    first = ForkingPickler.loads(bytes(ForkingPickler.dumps(Batch(data=images[:3]))))
    second = ForkingPickler.loads(bytes(ForkingPickler.dumps(Batch(data=images[3:]))))
    del images, second
    gc.collect()
    again = pool.tensor(SHAPE)
    again.fill_(1)
    assert again.data_ptr() != pointer
    assert (first["data"] == 7).all()


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    from helpers.packs import image_pack

    return image_pack(tmp_path_factory, "lease-fault-pack", 32)


def with_channels_first(samples):
    """A collate_fn that keeps the default batch and adds its images channels first (a view, no copy)."""
    batch = collate_samples(samples)
    batch["pixels"] = batch["data"].permute(0, 3, 1, 2)
    return batch


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_held_view_of_a_worker_batch_is_not_overwritten_when_its_sibling_view_is_dropped(jpegs):
    ds = CorgiPileDataset(jpegs, batching=Batches(4, collate_fn=with_channels_first),
                          decode=ImageDecoder(size=(256, 320)), seed=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1, timeout=60)
    held = []
    for batch in loader:
        pixels = batch["pixels"]
        held.append((pixels, pixels.clone()))
        del batch, pixels
        gc.collect()
    assert len(held) == 8
    assert all(torch.equal(kept, copy) for kept, copy in held)


def as_int8(image):
    """A transform that reinterprets the decoded row (a view, no copy)."""
    return image.view(torch.int8)


def test_a_leased_tensor_of_another_dtype_than_uint8_arrives_as_sent(monkeypatch):
    pool = fresh_pool(monkeypatch)
    images = pool.tensor(SHAPE)
    images.copy_(torch.randint(0, 256, SHAPE, dtype=torch.uint8))
    words = images.view(4, -1).view(torch.int32)[1:]
    received = ForkingPickler.loads(bytes(ForkingPickler.dumps(Batch(data=words))))["data"]
    assert received.dtype == torch.int32 and torch.equal(received, words)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_worker_batch_transformed_to_another_dtype_arrives_with_it(jpegs):
    kwargs = dict(batching=Batches(4), decode=ImageDecoder(size=(256, 320)), seed=4, transform=as_int8,
                  shuffle=Shuffle("none"))
    expected = [batch["data"].clone() for batch in CorgiPileDataset(jpegs, **kwargs)]
    loader = torch.utils.data.DataLoader(CorgiPileDataset(jpegs, **kwargs), batch_size=None, num_workers=1, timeout=60)
    received = [batch["data"].clone() for batch in loader]
    assert [b.dtype for b in received] == [torch.int8] * len(expected)
    assert all(torch.equal(a, b) for a, b in zip(received, expected))


def test_a_view_of_a_leased_buffer_inside_a_field_keeps_it_until_dropped(monkeypatch):
    pool = fresh_pool(monkeypatch)
    images = pool.tensor(SHAPE)
    images.fill_(7)
    pointer = images.data_ptr()
    pickled = bytes(ForkingPickler.dumps(Batch(data=images, extra={"chw": [images.permute(0, 3, 1, 2)]})))
    del images
    received = ForkingPickler.loads(pickled)
    nested = received["extra"]["chw"][0]
    del received
    gc.collect()
    again = pool.tensor(SHAPE)
    again.fill_(1)
    assert again.data_ptr() != pointer
    assert (nested == 7).all()


@pytest.mark.parametrize("payload", [b"", b"not an image at all"])
def test_device_decoding_names_the_sample_whose_bytes_are_no_image(payload):
    import io

    from PIL import Image

    from corgi_io.errors import DecodeError
    from corgi_io.loaders.device_images import decode_batch

    good = io.BytesIO()
    Image.new("RGB", (40, 30), "red").save(good, "JPEG")
    with pytest.raises(DecodeError, match="'cat/broken'"):
        decode_batch(ImageDecoder(size=16, device="cpu"), [good.getvalue(), payload], [0, 1], ["cat/ok", "cat/broken"],
                     torch.device("cpu"))


@pytest.fixture(scope="module")
def images_and_texts(tmp_path_factory):
    from corgi_io import PackOptions, pack
    from helpers.corpus_factory import make_image_corpus

    source = tmp_path_factory.mktemp("mixed-corpus")
    make_image_corpus(source, 40, long_tail=False)
    for i in (2, 9, 21):
        (source / "cat" / f"note{i}.txt").write_text("hello " * i)
    root = tmp_path_factory.mktemp("mixed-pack") / "pack"
    pack(source, root, PackOptions(block_samples=4), progress=False)
    return root


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_sample_refused_for_its_kind_keeps_the_later_batches_in_their_rows(images_and_texts, monkeypatch):
    """on_error="skip": a text sample that an ImageDecoder refuses takes its row, as a failed image does, so every
    later whole batch is its slab's rows as they are (no copy, and in a worker its memory is reused)."""
    from corgi_io.loaders import collate

    copied, leading_rows = [], collate._leading_rows

    def recording(values):
        rows = leading_rows(values)
        copied.append(rows is None and len(values) == 4)
        return rows

    monkeypatch.setattr(collate, "_leading_rows", recording)
    ds = CorgiPileDataset(images_and_texts, shuffle=Shuffle("none"), batching=Batches(4),
                          decode=Decoding(ImageDecoder(size=32), on_error="skip"))
    sizes = [len(batch["key"]) for batch in ds]
    assert sum(sizes) == 40 and sizes.count(4) >= 5
    assert not any(copied)


@pytest.fixture(scope="module")
def some_with_masks(tmp_path_factory):
    """16 samples of a jpg and a txt; all but one have a png too."""
    from corgi_io import PackOptions, pack
    from helpers.corpus_factory import write_image

    root = tmp_path_factory.mktemp("masks")
    for i in range(16):
        stem = root / "src" / "cat" / f"{i:03d}"
        write_image(stem.with_suffix(".jpg"), 40, 30, seed=i)
        stem.with_suffix(".txt").write_text(f"cat {i}", encoding="utf-8")
        if i != 2:
            write_image(stem.with_suffix(".png"), 20, 20, seed=100 + i)
    pack(root / "src", root / "pack", PackOptions(), progress=False)
    return root / "pack"


def test_a_sample_without_a_decoded_field_keeps_the_later_batches_in_their_rows(some_with_masks, monkeypatch):
    from corgi_io.loaders import collate

    copied, leading_rows = [], collate._leading_rows

    def recording(values):
        rows = leading_rows(values)
        copied.append(rows is None)
        return rows

    monkeypatch.setattr(collate, "_leading_rows", recording)
    ds = CorgiPileDataset(some_with_masks, batching=Batches(4), shuffle=Shuffle("none"),
                          decode={"jpg": ImageDecoder(size=32), "png": ImageDecoder(size=16)})
    batches = list(ds)
    without = [i for i, b in enumerate(batches) if isinstance(b["png"], list)]
    assert len(without) == 1 and without[0] < len(batches) - 1  # batches after the one lacking a png follow it
    assert not any(copied)


def test_a_batch_copied_in_a_worker_holds_its_tensors(monkeypatch):
    import copy

    pool = fresh_pool(monkeypatch)
    images = pool.tensor(SHAPE)
    images.fill_(3)
    batch = Batch(data=images, label=torch.arange(4), key=["a", "b", "c", "d"])
    shallow, deep = copy.copy(batch), copy.deepcopy(batch)
    assert type(shallow) is Batch and shallow["data"] is images and shallow["key"] is batch["key"]
    assert type(deep) is Batch and isinstance(deep["data"], torch.Tensor) and torch.equal(deep["data"], images)
    assert deep["data"].data_ptr() != images.data_ptr() and deep["key"] == batch["key"]


def test_a_small_batch_over_a_pooled_buffer_releases_it(monkeypatch):
    """A partial last batch (rows of a full-size slab, below collate.INLINE_BYTES) gives its buffer back too."""
    pool = fresh_pool(monkeypatch)
    images = pool.tensor(SHAPE)
    images.fill_(5)
    pointer = images.data_ptr()
    received = ForkingPickler.loads(bytes(ForkingPickler.dumps(Batch(data=images[:1, :128], label=torch.arange(1)))))
    assert (received["data"] == 5).all() and received["data"].shape == (1, 128, 512, 3)
    assert torch.equal(received["label"], torch.arange(1))
    del images, received
    gc.collect()
    assert pool.tensor(SHAPE).data_ptr() == pointer

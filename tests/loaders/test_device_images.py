"""ImageDecoder(device=...): the workers pass a batch's image bytes on (`EncodedImages`) and the training process
decodes them, crops, resizes and flips them on the device.  On a CPU device (every test here but the last) the
decode is the CPU library's and the crop, resize and flip are the device path's torch operations; on a GPU the
decode is nvJPEG (skipped without one)."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from corgi_io import ArgumentError, DecodeError
from corgi_io.images.crops import CROPS, draw_numbers, sample_uniforms
from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder, Shuffle
from corgi_io.loaders.device import _moved
from corgi_io.loaders.device_images import EncodedImages, decode_batch
from helpers.packs import image_pack
from images.test_fused import jpeg_claiming, photo, pillow_reference

CPU = torch.device("cpu")
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def on_cpu(decoder: ImageDecoder, payloads: list, indices=None) -> np.ndarray:
    indices = range(len(payloads)) if indices is None else indices
    return decode_batch(decoder, payloads, np.array(indices), [f"k{i}" for i in indices], CPU).numpy()


def mean_error(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).mean())


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_whole_images_match_pillow_within_two_grey_levels(fmt):
    payloads = [photo(320, 240, fmt, seed=s) for s in range(3)] + [photo(180, 260, fmt, seed=9)]
    batch = on_cpu(ImageDecoder(size=(96, 128), crop="none", flip=False), payloads)
    assert batch.shape == (4, 96, 128, 3) and batch.dtype == np.uint8
    for data, image in zip(payloads, batch):
        width, height = Image.open(io.BytesIO(data)).size
        assert mean_error(image, pillow_reference(data, (0, 0, width, height), (96, 128))) <= 2


def test_random_crops_are_the_cpu_paths_boxes_and_flips():
    """The same (seed, epoch, index) gives the device path and the fused CPU path the same crop and flip: their
    images differ by DCT scaling and the resizers' rounding (a few grey levels), and a flip would be far off."""
    decoder = ImageDecoder(size=64, seed=5).for_epoch(5, 3)
    payloads, indices = [photo(400, 300, seed=s) for s in range(6)], [11, 2, 907, 40, 3, 5]
    batch = on_cpu(decoder, payloads, indices)
    for data, index, image in zip(payloads, indices, batch):
        fused = decoder(data, {"index": index}).numpy()
        assert mean_error(image, fused) <= 6, index
        assert mean_error(image, fused) < mean_error(image[:, ::-1], fused)  # flipped alike


def test_crops_follow_the_shared_boxes():
    decoder = ImageDecoder(size=(40, 50), scale=(0.2, 0.3), flip=False).for_epoch(1, 0)
    data = photo(300, 200, seed=4)
    uniforms = sample_uniforms(1, 0, np.array([7]), draw_numbers())
    x, y, w, h = (int(v[0]) for v in CROPS["random_resized"]([300], [200], (40, 50), uniforms, (0.2, 0.3),
                                                              decoder.ratio))
    assert mean_error(on_cpu(decoder, [data], [7])[0], pillow_reference(data, (x, y, w, h), (40, 50))) <= 3


def test_an_oversized_or_broken_image_is_a_decode_error_naming_its_key():
    decoder = ImageDecoder(size=32, max_pixels=10_000)
    with pytest.raises(DecodeError, match="'k1'") as info:
        on_cpu(decoder, [photo(64, 64), jpeg_claiming(30000, 30000)])
    assert info.value.key == "k1"
    with pytest.raises(DecodeError, match="'k0'"):
        on_cpu(decoder, [photo(64, 64)[:300]])


def test_a_device_that_torch_does_not_know_is_refused():
    with pytest.raises(ArgumentError, match="not a torch device"):
        ImageDecoder(device="gpu7")
    assert ImageDecoder(device="cuda:0").on_device and not ImageDecoder().on_device


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return image_pack(tmp_path_factory, "device-pack", 24)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_workers_pass_the_bytes_and_the_batch_decodes_as_the_cpu_path_crops(images, workers):
    device = ImageDecoder(size=24, device="cuda", seed=2)  # decoded below on the CPU: the batch is what matters
    ds = CorgiPileDataset(images, batching=Batches(6), decode=device, seed=2)
    ds.set_epoch(1)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, timeout=60 if workers else 0)
    raw = {s["key"]: s["data"] for s in CorgiPileDataset(images, shuffle=Shuffle("none"))}
    cpu = ImageDecoder(size=24).for_epoch(2, 1)
    seen = 0
    for batch in loader:
        encoded = batch["data"]
        assert isinstance(encoded, EncodedImages) and encoded.decoder.epoch == 1 and len(encoded) == 6
        assert list(encoded.payloads) == [raw[key] for key in batch["key"]]
        decoded = encoded.decode("cpu")
        assert torch.equal(_moved(batch, CPU, pin_memory=False)["data"], decoded)  # what to_device does on a GPU
        for key, index, image in zip(batch["key"], batch["index"].tolist(), decoded):
            assert mean_error(image, cpu(raw[key], {"index": index})) <= 6, key
            seen += 1
    assert seen == 24


@pytest.mark.parametrize("options", [{}, {"transform": lambda x: x},
                                     {"batching": Batches(4), "transform": lambda x: x}])
def test_device_decoding_needs_raw_batches(images, options):
    with pytest.raises(ArgumentError, match="device"):
        CorgiPileDataset(images, decode=ImageDecoder(device="cuda"), **options)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CI has none)")
def test_nvjpeg_batches_match_the_cpu_device_path():
    pytest.importorskip("torchvision", reason="pip install torchvision (the build that matches torch)")
    decoder = ImageDecoder(size=64, device="cuda", seed=3)
    payloads = [photo(400, 300, seed=s) for s in range(8)] + [photo(120, 90, "PNG")]
    encoded = EncodedImages(payloads, np.arange(9), [f"k{i}" for i in range(9)], decoder)
    gpu = encoded.decode()
    assert gpu.device.type == "cuda" and gpu.shape == (9, 64, 64, 3)
    assert mean_error(gpu.cpu().numpy(), encoded.decode("cpu").numpy()) <= 2

"""decode=ImageDecoder(...) through CorgiPileDataset: batches are uint8 (B, H, W, 3) filled in place, every
image is the fused decode of its own bytes with the crop of (seed, epoch, index), and crops survive resume."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io import DecodeError, PackOptions, pack
from corgi_io.loaders import Batches, CorgiPileDataset, Decoding, ImageDecoder, Shuffle, collate_samples
from helpers.corpus_factory import make_image_corpus, png_claiming
from helpers.packs import image_pack
from images.test_fused import jpeg_claiming

N = 40
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """40 JPEGs and PNGs of 32..96 pixels a side, in blocks of 4."""
    return image_pack(tmp_path_factory, "image-pack", N)


def payloads(root) -> dict:
    """{key: (index, payload bytes)} of every sample."""
    return {s["key"]: (s["index"], s["data"]) for s in CorgiPileDataset(root, shuffle=Shuffle("none"))}


def decoder(**options) -> ImageDecoder:
    return ImageDecoder(size=(24, 32), **options)


def test_batches_are_uint8_images_each_the_fused_decode_of_its_own_bytes(images):
    raw = payloads(images)
    ds = CorgiPileDataset(images, batching=Batches(8), decode=decoder(), seed=3)
    ds.set_epoch(2)
    batches = list(ds)
    assert [len(b["key"]) for b in batches] == [8] * 5
    expected = decoder().for_epoch(3, 2)
    for batch in batches:
        assert batch["data"].dtype == torch.uint8 and batch["data"].shape == (8, 24, 32, 3)
        for key, image in zip(batch["key"], batch["data"]):
            index, data = raw[key]
            assert torch.equal(image, expected(data, {"index": index}))


def test_the_same_seed_gives_the_same_crops_and_another_epoch_other_ones(images):
    def epoch_images(seed: int, epoch: int) -> dict:
        ds = CorgiPileDataset(images, decode=decoder(), seed=seed)
        ds.set_epoch(epoch)
        return {s["key"]: s["data"] for s in ds}

    first, again, later = epoch_images(0, 1), epoch_images(0, 1), epoch_images(0, 2)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert sum(not torch.equal(first[k], later[k]) for k in first) > N // 2


def test_centre_crops_without_flips_are_the_same_every_epoch(images):
    crops = [{s["key"]: s["data"] for s in CorgiPileDataset(images, decode=decoder(crop="center", flip=False),
                                                             seed=epoch)} for epoch in (0, 1)]
    assert all(torch.equal(crops[0][k], crops[1][k]) for k in crops[0])


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_resume_gives_the_same_remaining_images(images, workers):
    def loader(ds):
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers, timeout=60 if workers else 0)

    whole = [b["data"] for b in loader(CorgiPileDataset(images, batching=Batches(4), decode=decoder(), seed=5))]
    it = iter(loader(CorgiPileDataset(images, batching=Batches(4), decode=decoder(), seed=5)))
    for _ in range(3):
        next(it)
    resumed = loader(CorgiPileDataset(images, batching=Batches(4), decode=decoder(), seed=5))
    resumed.load_state_dict(it.state_dict())
    rest = [b["data"] for b in resumed]
    assert len(rest) == len(whole) - 3 and all(torch.equal(a, b) for a, b in zip(rest, whole[3:]))


@pytest.mark.slow
def test_worker_batches_match_the_main_process(images):
    def by_key(workers: int) -> dict:
        ds = CorgiPileDataset(images, batching=Batches(8), decode=decoder(), seed=1)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, timeout=60 if workers else 0)
        return {k: img for b in loader for k, img in zip(b["key"], b["data"])}

    alone, workers = by_key(0), by_key(2)
    assert alone.keys() == workers.keys() and all(torch.equal(alone[k], workers[k]) for k in alone)


@pytest.fixture(scope="module")
def with_bad(tmp_path_factory):
    """A pack of 11 good images, an 8x8 PNG whose pixels are cut short and a JPEG whose header claims 30000x30000
    (packed without a pixel bound: the loader's is under test)."""
    source = tmp_path_factory.mktemp("bad-images")
    make_image_corpus(source, 11, long_tail=False)
    (source / "cat" / "broken.png").write_bytes(png_claiming(8, 8))
    (source / "cat" / "bomb.jpg").write_bytes(jpeg_claiming(30000, 30000))
    root = tmp_path_factory.mktemp("bad-image-pack") / "pack"
    pack(source, root, PackOptions(block_samples=4, max_pixels=None), progress=False)
    return root


def test_broken_images_are_skipped_and_their_batches_keep_the_others(with_bad):
    raw = payloads(with_bad)
    assert {"cat/broken", "cat/bomb"} <= raw.keys()
    ds = CorgiPileDataset(with_bad, batching=Batches(6), decode=Decoding(decoder(), on_error="skip"))
    with pytest.warns(UserWarning) as caught:
        batches = list(ds)
    assert {"truncated" in str(w.message) or "30000x30000" in str(w.message) for w in caught} == {True}
    keys = [k for b in batches for k in b["key"]]
    assert sorted(keys) == sorted(k for k in raw if k not in ("cat/broken", "cat/bomb"))
    expected = decoder().for_epoch(0, 0)
    for batch in batches:
        for key, image in zip(batch["key"], batch["data"]):
            assert torch.equal(image, expected(raw[key][1], {"index": raw[key][0]}))


@pytest.mark.slow
def test_workers_forked_after_the_parent_used_opencv_threads_do_not_hang(images):
    import cv2

    cv2.resize(np.zeros((3000, 3000, 3), np.uint8), (1000, 1000))  # OpenCV's thread pool, busy before the fork
    ds = CorgiPileDataset(images, batching=Batches(8), decode=decoder())
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=60)
    assert sum(len(b["key"]) for b in loader) == N


def test_a_broken_image_raises_a_decode_error_naming_it(with_bad):
    words = {"cat/broken": "cannot decode (OSError: image file is truncated",
             "cat/bomb": "image is 30000x30000 = 900,000,000 pixels, above max_pixels=89,478,485"}
    with pytest.raises(DecodeError) as info:
        list(CorgiPileDataset(with_bad, decode=decoder()))
    message = str(info.value)
    assert "\n" not in message and info.value.key in words and info.value.shard == "shard-000000.tar"
    assert f"byte offset {info.value.offset}: sample {info.value.key!r} (image): " in message
    assert words[info.value.key] in message


def test_batches_are_filled_in_place_not_stacked(images, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.stack copied a batch that was decoded in place")

    ds = CorgiPileDataset(images, batching=Batches(8), decode=decoder())
    monkeypatch.setattr(torch, "stack", refuse)
    assert sum(len(b["data"]) for b in ds) == N


def test_collate_takes_consecutive_rows_of_one_tensor_as_they_are():
    slab = torch.arange(4 * 6, dtype=torch.uint8).reshape(4, 2, 3)
    rows = [{"data": slab[i]} for i in range(4)]
    whole, first = collate_samples(rows)["data"], collate_samples(rows[:3])["data"]
    assert torch.equal(whole, slab) and whole.data_ptr() == slab.data_ptr()
    assert torch.equal(first, slab[:3]) and first.data_ptr() == slab.data_ptr()
    for others in (rows[::-1], rows[1:], [rows[0], rows[2]]):
        batch = collate_samples(others)["data"]
        assert batch.data_ptr() != slab.data_ptr() and torch.equal(batch, torch.stack([r["data"] for r in others]))


@pytest.mark.parametrize("options,words", [({"size": 0}, "size"), ({"crop": "corner"}, "crop"),
                                           ({"scale": (0.5, 0.1)}, "scale"), ({"scale": (0.5, 2.0)}, "at most 1"),
                                           ({"ratio": (0, 1)}, "ratio"), ({"jpeg_decoder": "gpu"}, "jpeg_decoder"),
                                           ({"size": (1, 2, 3)}, "height, width")])
def test_bad_options_are_refused(options, words):
    with pytest.raises(ValueError, match=words):
        ImageDecoder(**options)


def test_the_decoder_survives_a_round_trip_through_its_fields():
    d = ImageDecoder(size=64, crop="center")
    assert d.size == (64, 64) and d.shape == (64, 64, 3) and d.for_epoch(1, 2).epoch == 2
    assert np.asarray(d.for_epoch(1, 2).size).tolist() == [64, 64]


def test_the_default_jpeg_decoder_is_simplejpeg_where_installed_else_opencv(monkeypatch):
    pytest.importorskip("simplejpeg", reason="pip install 'corgi-io[images]'")
    assert ImageDecoder().jpeg_decoder == "simplejpeg"
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # as if it were not installed: its import fails
    assert ImageDecoder().jpeg_decoder == "opencv"

"""Decode failures: a DecodeError in corgi's words (kind mismatch, max_pixels, broken body), and the
on_error policy: "raise" stops at the first, "skip" drops the sample from its batch with a warning and
keeps len(loader) steps, through real DataLoader workers."""
from __future__ import annotations

import warnings

import pytest
import torch
from PIL import Image

from corgi_io import CorruptDataError, DecodeError, PackOptions, pack
from corgi_io.loaders import Batches, CorgiPileDataset, Decoding, Shuffle, on_error
from helpers.corpus_factory import png_claiming, write_image

BAD = {"a/broken": "cannot decode (OSError: image file is truncated", "a/bomb": "image is 60000x60000 = "
       "3,600,000,000 pixels, above max_pixels=89,478,485"}
BOMB = "a/bomb"


@pytest.fixture(scope="module")
def bad_pack(tmp_path_factory):
    """(pack root, good keys): 14 16x12 PNGs, an 8x8 PNG whose pixel data is cut short and a PNG whose header
    claims 60000x60000; sizes by file size, so that pack-time probes let both bad ones in (their checksums hold)."""
    source = tmp_path_factory.mktemp("bad-corpus")
    good = []
    for i in range(14):
        write_image(source / "a" / f"{i:02d}.png", 16, 12, seed=i)
        good.append(f"a/{i:02d}")
    (source / "a" / "broken.png").write_bytes(png_claiming(8, 8))
    (source / "a" / "bomb.png").write_bytes(png_claiming(60000, 60000))
    out = tmp_path_factory.mktemp("bad-pack") / "pack"
    pack(source, out, PackOptions(block_samples=3, max_pixels=None), progress=False)  # the loader's bound is under test
    return out, good


def one_sample_pack(tmp_path, name: str, data: bytes):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / name).write_bytes(data)
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(max_pixels=None), progress=False)
    return tmp_path / "pack"


@pytest.mark.parametrize("decode", ["pil", "rgb", "auto"])
def test_a_bomb_is_refused_in_corgis_words_not_pillows(tmp_path, decode):
    root = one_sample_pack(tmp_path, "bomb.png", png_claiming(60000, 60000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a DecompressionBombWarning on the way
        with pytest.raises(DecodeError) as info:
            list(CorgiPileDataset(root, decode=decode))
    message = str(info.value)
    assert message.endswith(f"shard-000000.tar: byte offset {info.value.offset}: sample 'a/bomb' (image): "
                            f"{BAD[BOMB]}"), message
    assert (info.value.key, info.value.shard) == (BOMB, "shard-000000.tar")
    assert not isinstance(info.value, CorruptDataError) and "DecompressionBomb" not in message


def test_max_pixels_is_the_only_bound_when_pillows_own_would_warn_or_refuse(tmp_path, monkeypatch):
    write_image(tmp_path / "src" / "a" / "wide.png", 60, 60)  # 3,600 pixels
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(), progress=False)
    for limit in (3000, 1000):  # Pillow warns between 1x and 2x its limit, and refuses above 2x
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (sample,) = CorgiPileDataset(tmp_path / "pack", decode=Decoding("rgb", max_pixels=4000))
        assert sample["data"].shape == (60, 60, 3)
        with pytest.raises(DecodeError, match="sample 'a/wide' \\(image\\): image is 60x60 = 3,600 pixels, above "
                                              "max_pixels=2,000$"):
            list(CorgiPileDataset(tmp_path / "pack", decode=Decoding("pil", max_pixels=2000)))


@pytest.mark.parametrize("decode,kind", [("rgb", "image"), ("pil", "image"), ("video", "video"), ("text", "text")])
def test_a_kind_mismatch_says_so(packed_mixed, decode, kind):
    first = next(s for s in CorgiPileDataset(packed_mixed("wds"), shuffle=Shuffle("none")) if s["kind"] != kind)
    with pytest.raises(DecodeError) as info:
        list(CorgiPileDataset(packed_mixed("wds"), shuffle=Shuffle("none"), decode=decode))
    article = {"image": "an image", "video": "a video", "text": "text"}[first["kind"]]
    plural = {"image": "images", "video": "videos", "text": "text"}[kind]
    assert str(info.value).endswith(f"shard-{info.value.shard[6:12]}.tar: byte offset {info.value.offset}: sample "
                                    f"{first['key']!r} is {article}; decode={decode!r} decodes {plural}: pack with "
                                    f"--kind {kind} or use decode='auto'"), str(info.value)
    assert info.value.key == first["key"] and "\n" not in str(info.value)


def test_skip_on_a_mixed_pack_keeps_every_image_and_the_steps(packed_mixed):
    kinds = {s["key"]: s["kind"] for s in CorgiPileDataset(packed_mixed("wds"))}
    dataset = CorgiPileDataset(packed_mixed("wds"), decode=Decoding("rgb", on_error="skip"),
                               batching=Batches(8, collate_fn=list))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(dataset)
    others = sum(kind != "image" for kind in kinds.values())
    assert others > on_error.WARN_FIRST and len(caught) == on_error.WARN_FIRST + 1
    assert "decode='rgb' decodes images" in str(caught[0].message)
    assert str(caught[-1].message).startswith(f"rank 0 worker 0 skipped {others} samples that failed to decode")
    assert len(batches) == len(dataset) and all(1 <= len(batch) <= 8 for batch in batches)
    assert sorted(s["key"] for batch in batches for s in batch) == sorted(k for k, v in kinds.items() if v == "image")


def test_skip_warns_for_the_first_failures_then_counts(bad_pack, monkeypatch):
    root, good = bad_pack
    monkeypatch.setattr(on_error, "WARN_FIRST", 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(CorgiPileDataset(root, decode=Decoding("rgb", on_error="skip"), batching=Batches(4)))
    texts = [str(w.message) for w in caught]
    assert len(texts) == 2, texts
    assert any(f"sample {key!r} (image): {reason}" in texts[0] for key, reason in BAD.items()), texts
    assert texts[0].endswith("skipped (on_error='skip'; 1 skipped by rank 0 worker 0 this epoch; later ones are "
                             "counted, not named)") and "\n" not in texts[0]
    assert texts[1] == ("rank 0 worker 0 skipped 2 samples that failed to decode this epoch (on_error='skip'; "
                        "the first 1 named above)")
    assert sorted(key for batch in batches for key in batch["key"]) == good


def test_a_batch_whose_every_sample_fails_raises(tmp_path):
    root = one_sample_pack(tmp_path, "broken.png", png_claiming(8, 8))
    dataset = CorgiPileDataset(root, decode=Decoding("rgb", on_error="skip"), batching=Batches(1))
    with pytest.warns(UserWarning, match="skipped"), pytest.raises(DecodeError) as info:
        list(dataset)
    assert str(info.value).endswith("; and every other sample of its batch of 1 failed to decode: on_error='skip' "
                                    "yields a batch without its failed samples, never an empty one")
    assert info.value.key == "a/broken" and "image file is truncated" in str(info.value)


def test_a_failing_transform_is_not_skipped(bad_pack):
    root, _ = bad_pack

    def broken(data):
        raise RuntimeError("my transform broke")

    with pytest.raises(RuntimeError, match="my transform broke"):
        list(CorgiPileDataset(root, decode=Decoding("rgb", on_error="skip"), batching=Batches(4),
                              transform=broken))


@pytest.mark.slow
def test_skip_through_two_workers_yields_len_loader_batches_without_the_bad_keys(bad_pack):
    root, good = bad_pack
    dataset = CorgiPileDataset(root, decode=Decoding("rgb", on_error="skip"), batching=Batches(4),
                               shuffle=Shuffle(buffer_blocks=2))
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=60)
    batches = list(loader)
    assert len(batches) == len(loader) == len(dataset) == 4  # 16 samples: the steps of an epoch without failures
    keys = [key for batch in batches for key in batch["key"]]
    assert sorted(keys) == good and all(batch["data"].shape[1:] == (12, 16, 3) for batch in batches)
    assert sorted(len(batch["key"]) for batch in batches)[:2] in ([2, 4], [3, 3])  # each bad one shortened its batch
    # (the workers' warnings are not checked here: pytest records and drops warnings in forked workers)


@pytest.mark.slow
def test_raise_through_two_workers_names_the_bad_key(bad_pack):
    root, _ = bad_pack
    dataset = CorgiPileDataset(root, decode="rgb", batching=Batches(4), shuffle=Shuffle(buffer_blocks=2))
    with pytest.raises(DecodeError) as info:
        list(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=60))
    message = str(info.value)
    assert any(f"sample {key!r} (image): {reason}" in message for key, reason in BAD.items()), message
    assert "shard-000000.tar: byte offset" in message

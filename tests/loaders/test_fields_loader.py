"""Issue 18 §1, load side: CorgiPileDataset yields each field under its name, decodes by a field -> decoder
mapping and batches every field; single-field packs keep the sample dict they had."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.corpus_factory import write_image

from corgi_io.errors import ArgumentError, CorruptDataError
from corgi_io.loaders import Batches, CorgiPileDataset, Reading, Shuffle
from corgi_io.loaders.collate import PackedBytes, collate_samples
from corgi_io.packing import PackOptions, pack

DATA = Path(__file__).parents[1] / "data"
SINGLE_FIELD_KEYS = {"index", "key", "label", "size", "kind", "ext", "data"}


@pytest.fixture(scope="module", params=["wds", "tfrecord"])
def captioned(request, tmp_path_factory):
    """A pack of 6 image + caption samples, 4 of them with a json too: (pack root, {key: {field: bytes}})."""
    root = tmp_path_factory.mktemp(f"captioned-{request.param}")
    expected = {}
    for label in ("cat", "dog"):
        for i in range(3):
            stem = root / "src" / label / f"{i:03d}"
            write_image(stem.with_suffix(".jpg"), 8, 6, seed=i)
            stem.with_suffix(".txt").write_text(f"a {label} number {i}", encoding="utf-8")
            if i != 1:
                stem.with_suffix(".json").write_text(json.dumps({"i": i}), encoding="utf-8")
            expected[f"{label}/{i:03d}"] = {p.suffix[1:]: p.read_bytes() for p in stem.parent.glob(f"{i:03d}.*")}
    pack(root / "src", root / "pack", PackOptions(format=request.param), progress=False)
    return root / "pack", expected


def test_each_field_is_under_its_name_and_data_is_the_primary(captioned):
    root, expected = captioned
    samples = list(CorgiPileDataset(root, seed=0, shuffle=Shuffle("none")))
    assert len(samples) == 6
    for sample in samples:
        fields = expected[sample["key"]]
        assert sample["fields"] == ["jpg", *sorted(name for name in fields if name != "jpg")]
        assert {name: sample[name] for name in sample["fields"]} == fields
        assert sample["data"] is sample["jpg"] and sample["ext"] == "jpg" and sample["kind"] == "image"
        assert ("json" in sample) == ("json" in fields)  # a missing field is absent, and `fields` says so


def test_a_decode_mapping_decodes_each_field_and_batches_hold_every_field(captioned):
    root, expected = captioned
    dataset = CorgiPileDataset(root, seed=0, shuffle=Shuffle("none"), batching=Batches(3),
                               decode={"jpg": "rgb", "txt": "text", "json": "text"})
    batches = list(dataset)
    assert len(batches) == 2
    for batch in batches:
        assert batch["data"].shape == (3, 6, 8, 3) and batch["jpg"] is batch["data"]
        assert batch["txt"] == [expected[key]["txt"].decode() for key in batch["key"]]
        assert batch["json"] == [expected[key]["json"].decode() if "json" in expected[key] else None
                                 for key in batch["key"]]  # None where a sample lacks the field
        assert batch["fields"] == [sorted(expected[key], key=lambda name: (name != "jpg", name)) for key in batch["key"]]


def test_raw_fields_batch_as_packed_bytes_and_a_transform_stays_the_primary(captioned):
    root, _ = captioned
    dataset = CorgiPileDataset(root, seed=0, shuffle=Shuffle("none"), batching=Batches(2), decode={"jpg": "rgb"},
                               transform=lambda image: image.float().mean())
    batch = next(iter(dataset))
    assert isinstance(batch["txt"], PackedBytes) and batch["jpg"] is batch["data"]
    assert batch["data"].dtype == torch.float32 and batch["data"].shape == (2,)


def test_a_string_decode_still_decodes_the_primary_field(captioned):
    root, _ = captioned
    sample = next(iter(CorgiPileDataset(root, seed=0, shuffle=Shuffle("none"), decode="rgb")))
    assert sample["data"].shape == (6, 8, 3) and isinstance(sample["txt"], bytes)


def test_a_decode_mapping_refuses_a_field_of_another_kind(captioned):
    root, _ = captioned
    with pytest.raises(Exception, match="field 'txt' of sample .* is text; decode='rgb' decodes images"):
        next(iter(CorgiPileDataset(root, seed=0, shuffle=Shuffle("none"), decode={"txt": "rgb"})))
    with pytest.raises(ArgumentError):
        CorgiPileDataset(root, decode={1: "rgb"})


def test_records_that_disagree_with_the_manifest_are_corrupt(captioned, tmp_path):
    root, _ = captioned
    copy = tmp_path / "pack"
    shutil.copytree(root, copy)
    head = json.loads((copy / "manifest.json").read_text())
    with pytest.raises(CorruptDataError):  # verification off: the split's own parse still catches the damage
        shard = copy / head["shards"][0]["path"]
        data = bytearray(shard.read_bytes())
        data[:16] = b"\xff" * 16  # the first tar header's name, or the first TFRecord's framing
        shard.write_bytes(bytes(data))
        list(CorgiPileDataset(copy, seed=0, shuffle=Shuffle("none"), reading=Reading(verify=False)))


@pytest.mark.parametrize("root", [DATA / "v2-wds", DATA / "v2-tfrecord", DATA / "v1-wds"])
def test_single_field_packs_keep_their_sample_dict(root, tmp_path):
    shutil.copytree(root, tmp_path / "pack")
    samples = list(CorgiPileDataset(tmp_path / "pack", seed=0, shuffle=Shuffle("none")))
    assert samples and all(set(sample) == SINGLE_FIELD_KEYS for sample in samples)
    assert set(collate_samples(samples[:2])) == SINGLE_FIELD_KEYS


def test_an_image_decoder_field_fills_its_batch_beside_decoded_captions(captioned, monkeypatch):
    from corgi_io.loaders import ImageDecoder

    root, expected = captioned
    decode = {"jpg": ImageDecoder(size=(6, 8)), "txt": "text"}
    monkeypatch.setattr(torch, "stack", None)  # the images go into their rows: nothing may stack them
    batches = list(CorgiPileDataset(root, batching=Batches(3), decode=decode, seed=2))
    assert [b["data"].shape for b in batches] == [(3, 6, 8, 3)] * 2 and all(b["jpg"] is b["data"] for b in batches)
    single = ImageDecoder(size=(6, 8)).for_epoch(2, 0)
    for batch in batches:
        for i, key in enumerate(batch["key"]):
            assert batch["txt"][i] == expected[key]["txt"].decode("utf-8")
            assert torch.equal(batch["data"][i], single(expected[key]["jpg"], {"index": batch["index"][i].item()}))

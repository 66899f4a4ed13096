"""Mixed packs: every sample carries its kind and extension, and decode="auto" picks the decoder by kind."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
import torch
from PIL import Image

from corgi_io import DecodeError, PackOptions, pack
from corgi_io.loaders import AutoDecoder, CorgiPileDataset, Shuffle, VideoDecoder

pytest.importorskip("av", reason="pip install 'corgi-io[video]'")


def relpath(sample: dict) -> str:
    """The corpus file a sample came from, its extension lower-cased (keys percent-escape '.' in the last part)."""
    head, slash, last = sample["key"].rpartition("/")
    return f"{head}{slash}{unquote(last)}.{sample['ext']}"


def by_lower_ext(expected: dict) -> dict:
    """{relpath with a lower-case extension: (relpath, Expected)}."""
    return {f"{rel.rpartition('.')[0]}.{rel.rpartition('.')[2].lower()}": (rel, want) for rel, want in expected.items()}


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_every_sample_carries_kind_and_ext_and_auto_decodes_by_kind(packed_mixed, mixed_corpus, fmt):
    root, expected = mixed_corpus
    files = by_lower_ext(expected)
    seen = []
    for sample in CorgiPileDataset(packed_mixed(fmt), decode="auto"):
        rel, want = files[relpath(sample)]
        seen.append(rel)
        assert sample["kind"] == want.kind and sample["ext"] == rel.rpartition(".")[2].lower(), rel
        data = sample["data"]
        if want.kind == "image":
            assert data.dtype == torch.uint8 and data.shape[2] == 3 and data.shape[0] * data.shape[1] == want.size
            assert np.array_equal(data.numpy(), np.asarray(Image.open(root / rel).convert("RGB"))), rel
        elif want.kind == "video":
            assert data.dtype == torch.uint8 and data.shape == (8, 48, 64, 3), rel
        else:
            assert data == (root / rel).read_text(encoding="utf-8"), rel
    assert sorted(seen) == sorted(expected)


def test_auto_takes_its_clip_options_from_a_video_decoder(packed_mixed):
    decoder = AutoDecoder(video=VideoDecoder(frames=3, clip="random"))
    shapes = {s["kind"]: s["data"].shape for s in CorgiPileDataset(packed_mixed("wds"), decode=decoder)
              if s["kind"] == "video"}
    assert shapes == {"video": (3, 48, 64, 3)}


def test_an_image_decoder_on_a_mixed_pack_names_the_key_and_kind_it_cannot_decode(packed_mixed):
    dataset = CorgiPileDataset(packed_mixed("wds"), shuffle=Shuffle("none"), decode="pil")
    first_other = next(s for s in CorgiPileDataset(packed_mixed("wds"), shuffle=Shuffle("none"))
                       if s["kind"] != "image")
    with pytest.raises(DecodeError) as info:
        list(dataset)
    message, kind = str(info.value), {"video": "a video", "text": "text"}[first_other["kind"]]
    assert f"sample {first_other['key']!r} is {kind}; decode='pil' decodes images: pack with --kind image or use " \
           "decode='auto'" in message, message
    assert info.value.key == first_other["key"] and "\n" not in message and "shard-" in message


def test_the_example_corpus_has_animal_labels_for_every_kind_and_decodes_with_auto(tmp_path):
    corpus = Path(__file__).resolve().parents[2] / "examples" / "corpus"
    pack(corpus, tmp_path / "pack", PackOptions(), progress=False)
    dataset = CorgiPileDataset(tmp_path / "pack", decode="auto")
    assert dataset.manifest.labels == ["bird", "cat", "dog"] and not list(dataset.manifest.skip_records())
    kinds_per_label = {}
    for sample in dataset:
        kinds_per_label.setdefault(dataset.manifest.labels[sample["label"]], set()).add(sample["kind"])
        assert isinstance(sample["data"], str) == (sample["kind"] == "text")
    assert kinds_per_label == {label: {"image", "video", "text"} for label in ("bird", "cat", "dog")}

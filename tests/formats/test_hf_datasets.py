"""Hugging Face `datasets` reads wds packs (docs/format.md, "Reading packs with Hugging Face datasets"): a pack whose
samples share their field names reads as it is; any other is refused by the schema it infers from the first 5
samples, unless `features=` (from the manifest's fields) is given, which reads every sample whole."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.corpus_factory import make_mixed_corpus, write_image

from corgi_io.packing import PackOptions, pack

datasets = pytest.importorskip("datasets", reason="pip install datasets")

REFUSAL = "The TAR archives of the dataset should be in WebDataset format, but the files in the archive don't share"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Never the Hub: the packaged `webdataset` builder on local files needs no network, and must not try."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets.disable_progress_bars()


def load(out: Path, m, tmp_path: Path, features=None):
    shards = [str(out / shard.path) for shard in m.shards]
    return datasets.load_dataset("webdataset", data_files={"train": shards}, split="train",
                                 cache_dir=str(tmp_path / "hf-cache"), features=features)


def captioned(root: Path, n: int, caption=lambda i: True, extra=lambda i: False) -> dict:
    """n image+caption samples over cat/dog (a json beside those `extra` picks); {key: (width, caption or None)}."""
    samples = {}
    for i in range(n):
        label = ("cat", "dog")[i % 2]
        stem = root / label / f"{i:03d}"
        write_image(stem.with_suffix(".jpg"), 8 + i % 5, 6, seed=i)
        text = f"a {label} number {i}" if caption(i) else None
        if text is not None:
            stem.with_suffix(".txt").write_text(text, encoding="utf-8")
        if extra(i):
            stem.with_suffix(".json").write_text(json.dumps({"i": i}), encoding="utf-8")
        samples[f"{label}/{i:03d}"] = (8 + i % 5, text)
    return samples


def test_a_pack_whose_samples_share_their_fields_reads_every_sample(tmp_path):
    expected = captioned(tmp_path / "src", 24)
    out = tmp_path / "out"
    m = pack(tmp_path / "src", out, PackOptions(block_samples=4, shard_bytes=8 * 1024), progress=False)
    assert len(m.shards) >= 2 and m.fields == ["jpg", "txt"]
    ds = load(out, m, tmp_path)
    assert set(ds.features) == {"jpg", "txt", "cls", "__key__", "__url__"}
    assert isinstance(ds.features["jpg"], datasets.Image) and ds.features["cls"].dtype == "int64"
    assert len(ds) == m.num_samples == len(expected)
    keys = m.keys()
    assert ds["__key__"] == keys  # every sample once, in pack order, shard after shard
    for i, row in enumerate(ds):
        width, text = expected[row["__key__"]]
        assert row["jpg"].size == (width, 6) and row["txt"] == text
        assert row["cls"] == int(m.samples.label[i]) and m.labels[row["cls"]] == row["__key__"].split("/")[0]
        assert row["__url__"] == str(out / m.shards[int(m.samples.shard[i])].path)


def test_require_makes_a_pack_of_pairs_it_reads_and_refuses_the_pack_without(tmp_path):
    expected = captioned(tmp_path / "src", 20, caption=lambda i: i % 3 != 0)
    with pytest.raises(ValueError, match=REFUSAL):
        load(tmp_path / "all", pack(tmp_path / "src", tmp_path / "all", progress=False), tmp_path)
    m = pack(tmp_path / "src", tmp_path / "pairs", PackOptions(require=("jpg", "txt")), progress=False)
    ds = load(tmp_path / "pairs", m, tmp_path)
    assert len(ds) == m.num_samples == sum(text is not None for _, text in expected.values())
    assert sorted(zip(ds["__key__"], ds["txt"])) == sorted((k, t) for k, (_, t) in expected.items() if t is not None)


def test_a_mixed_pack_is_refused(tmp_path):
    make_mixed_corpus(tmp_path / "src", n_per_class=2, with_tricky_names=False)
    m = pack(tmp_path / "src", tmp_path / "out", progress=False)
    assert len(m.fields) > 1 and m.max_fields == 1
    with pytest.raises(ValueError, match=REFUSAL):
        load(tmp_path / "out", m, tmp_path)


def test_a_field_the_first_five_samples_lack_is_dropped_without_features(tmp_path):
    """Why docs/format.md says a pack is safe as it is only when every sample holds every field."""
    captioned(tmp_path / "src", 12, extra=lambda i: i >= 9)  # kept order: cat/000 ... cat/010, then dog/001 ...
    m = pack(tmp_path / "src", tmp_path / "out", PackOptions(order="keep"), progress=False)
    assert dict(zip(m.fields, m.field_counts())) == {"jpg": 12, "txt": 12, "json": 3}
    assert not any("json" in fields_of(m, i) for i in range(5))
    ds = load(tmp_path / "out", m, tmp_path)
    assert len(ds) == 12 and "json" not in ds.features


def fields_of(m, i: int) -> set:
    mask = int(m.samples.fields[i])
    return {name for bit, name in enumerate(m.fields) if mask >> bit & 1}


def test_features_from_the_manifest_read_a_mixed_pack_whole(tmp_path):
    """The docs' recipe: every sample arrives once with exactly its own fields, the others None."""
    make_mixed_corpus(tmp_path / "src", n_per_class=2)
    captioned(tmp_path / "src", 4, extra=lambda i: i % 2 == 0)  # cat/000.jpg+txt+json ... beside the mixed files
    out = tmp_path / "out"
    m = pack(tmp_path / "src", out, progress=False)
    head = json.loads((out / "manifest.json").read_text())
    decoded = {"jpg": datasets.Image(), "png": datasets.Image(), "txt": datasets.Value("string"),
               "json": {"i": datasets.Value("int64")}}  # the rest (avi, mp4, md): bytes
    features = datasets.Features({**{name: decoded.get(name, datasets.Value("binary")) for name in head["fields"]},
                                  "cls": datasets.Value("int64"), "__key__": datasets.Value("string"),
                                  "__url__": datasets.Value("string")})
    assert {"avi", "mp4", "md", "json"} <= set(head["fields"])
    ds = load(out, m, tmp_path, features)
    assert len(ds) == m.num_samples and ds["__key__"] == m.keys()
    shard = (out / m.shards[0].path).read_bytes()
    for i, row in enumerate(ds):
        present = {name for name in head["fields"] if row[name] is not None}
        assert present == fields_of(m, i), row["__key__"]
        assert row["cls"] == int(m.samples.label[i])
        primary = m.extensions[int(m.samples.ext[i])]
        if primary in ("avi", "mp4", "md"):  # the primary payload, byte for byte
            start = int(m.samples.data_offset[i])
            assert row[primary] == shard[start:start + int(m.samples.bytes[i])]
        if "json" in present:
            assert row["json"] == {"i": int(row["__key__"].split("/")[1])}


def test_tokens_arrive_as_their_ids(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    captioned(tmp_path / "src", 6)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        vocab={"[UNK]": 0, "a": 1, "cat": 2, "dog": 3, "number": 4}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "words.json"))
    m = pack(tmp_path / "src", tmp_path / "out", PackOptions(tokenizer=str(tmp_path / "words.json")), progress=False)
    ds = load(tmp_path / "out", m, tmp_path)
    assert set(ds.features) == {"tokens.npy", "jpg", "txt", "cls", "__key__", "__url__"} and len(ds) == 6
    for row in ds:
        label = row["__key__"].split("/")[0]
        assert row["tokens.npy"] == [1, 2 if label == "cat" else 3, 4, 0]

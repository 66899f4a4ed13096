"""Issue 18 §1, pack side: files sharing a folder and a stem are one sample with a field each, in both formats,
read back by stock readers; the manifest's field list and presence masks; --primary and --require; old packs."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import webdataset
from helpers.corpus_factory import write_image, write_text
from tfrecord.reader import tfrecord_loader

from corgi_io.errors import CorpusError, PackError
from corgi_io.formats import get_format
from corgi_io.manifest import MANIFEST_VERSION, ManifestError, open_manifest
from corgi_io.manifest.checksum import checksum_function
from corgi_io.packing import PackOptions, pack
from corgi_io.packing.corpus import EXTENSIONS, discover
from corgi_io.manifest.fields import FIELD_KINDS
from corgi_io.report.verify import verify
from helpers.packs import resync_row_groups

DATA = Path(__file__).parents[1] / "data"


def captioned_corpus(root: Path) -> dict:
    """cat/00i and dog/00i: an image and a caption each, a json beside all but the 001s; {key: {field: bytes}}."""
    samples = {}
    for label in ("cat", "dog"):
        for i in range(3):
            stem = root / label / f"{i:03d}"
            write_image(stem.with_suffix(".jpg"), 8 + i, 6, seed=i)
            stem.with_suffix(".txt").write_text(f"a {label} number {i}", encoding="utf-8")
            if i != 1:
                stem.with_suffix(".json").write_text(json.dumps({"i": i}), encoding="utf-8")
            samples[f"{label}/{i:03d}"] = {path.suffix[1:]: path.read_bytes()
                                           for path in stem.parent.glob(f"{i:03d}.*")}
    return samples


def test_extensions_come_from_the_field_kinds():
    assert EXTENSIONS == {kind: set(names) for kind, names in FIELD_KINDS.items()}


def test_files_sharing_a_stem_are_one_sample_even_when_another_name_sorts_between(tmp_path):
    write_image(tmp_path / "a" / "x.jpg", 4, 4)
    write_text(tmp_path / "a" / "x.m.txt", 2)  # sorts between x.jpg and x.txt by name: stem x.m
    write_text(tmp_path / "a" / "x.txt", 2)
    corpus = discover(tmp_path)
    assert corpus.names_and_keys(np.arange(len(corpus))) == (["a/x.jpg\0a/x.txt", "a/x.m.txt"], ["a/x", "a/x%2Em"])
    assert corpus.field_names == ["jpg", "txt"] and corpus.fields.tolist() == [3, 2]


def test_a_lone_sidecar_is_skipped_and_a_repeated_field_is_a_problem(tmp_path):
    write_image(tmp_path / "a" / "x.jpg", 4, 4)
    (tmp_path / "a" / "x.npy").write_bytes(b"\x93NUMPY")     # a field of x (no media kind needed)
    (tmp_path / "a" / "y.npy").write_bytes(b"\x93NUMPY")     # alone: no primary field
    (tmp_path / "a" / "x.cls").write_bytes(b"3")            # reserved: the label member
    write_image(tmp_path / "a" / "x.JPG", 4, 4)              # jpg again
    corpus = discover(tmp_path)
    assert (len(corpus), corpus.field_names) == (1, ["jpg", "npy"])
    reasons = {entry["path"]: entry["reason"] for entry in corpus.skipped}
    assert reasons["a/y.npy"] == "unknown extension '.npy'"
    assert "reserved" in reasons["a/x.cls"] and "repeats" in reasons["a/x.jpg"]  # x.JPG sorts first and is kept
    with pytest.raises(CorpusError, match="repeats"):
        discover(tmp_path, strict=True)


@pytest.mark.parametrize("kind", ["auto", "image"])
def test_an_empty_folder_is_still_an_empty_corpus(tmp_path, kind):
    (tmp_path / "src").mkdir()
    with pytest.raises(CorpusError, match="empty"):
        discover(tmp_path / "src", kind)


def test_more_than_64_field_names_are_refused(tmp_path):
    for i in range(65):
        write_image(tmp_path / "a" / f"s{i}.jpg", 2, 2)
        (tmp_path / "a" / f"s{i}.f{i}").write_bytes(b"x")
    with pytest.raises(CorpusError, match="more than 64 distinct field names"):
        discover(tmp_path)


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_fields_pack_and_stock_readers_see_them(tmp_path, fmt):
    expected = captioned_corpus(tmp_path / "src")
    m = pack(tmp_path / "src", tmp_path / "out", PackOptions(format=fmt), progress=False)
    assert (m.version, m.fields, m.max_fields, m.field_counts()) == (MANIFEST_VERSION, ["jpg", "json", "txt"], 3, [6, 4, 6])
    assert m.extensions == ["jpg"] and {m.kind_name(i) for i in range(m.num_samples)} == {"image"}
    masks = dict(zip(m.keys(), m.samples.fields.tolist()))
    assert masks == {key: 0b101 if key.endswith("001") else 0b111 for key in expected}
    assert m.samples.bytes.tolist() == [len(expected[key]["jpg"]) for key in m.keys()]  # the primary's bytes
    shard = str(tmp_path / "out" / m.shards[0].path)
    if fmt == "wds":
        got = {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__") and k != "cls"}
               for s in webdataset.WebDataset(shard, shardshuffle=False)}
    else:
        got = {}
        for record in tfrecord_loader(shard, None):
            fields = {k: bytes(v) for k, v in record.items() if k not in ("key", "label", "size", "ext", "data")}
            got[bytes(record["key"]).decode()] = {bytes(record["ext"]).decode(): bytes(record["data"]), **fields}
    assert got == expected


def test_a_record_is_one_contiguous_range_whose_checksum_covers_every_field(tmp_path):
    captioned_corpus(tmp_path / "src")
    m = pack(tmp_path / "src", tmp_path / "out", progress=False)
    data = (tmp_path / "out" / m.shards[0].path).read_bytes()
    crc = checksum_function(m.checksum)
    running = 0
    for i, record in enumerate(get_format("wds").parse_block(data[:int(m.blocks.length[0])])):
        offset, length = int(m.samples.offset[i]), int(m.samples.length[i])
        assert (record.offset, record.length, record.key) == (offset, length, m.key(i))
        running = crc(data[offset:offset + length], running)
        assert running == int(m.samples.checksum[i])
        assert [name for name, _ in record.fields][0] == "jpg" and len(record.fields) == bin(int(m.samples.fields[i])).count("1")


def test_require_drops_samples_without_those_fields_each_recorded(tmp_path):
    captioned_corpus(tmp_path / "src")
    m = pack(tmp_path / "src", tmp_path / "out", PackOptions(require=("jpg", "json")), progress=False)
    assert sorted(m.keys()) == ["cat/000", "cat/002", "dog/000", "dog/002"]
    assert sorted(entry["path"] for entry in list(m.skip_records())) == ["cat/001.jpg", "cat/001.txt", "dog/001.jpg", "dog/001.txt"]
    assert {entry["reason"] for entry in list(m.skip_records())} == {"no field 'json' (--require jpg,json)"}


def test_primary_chooses_the_field_whose_kind_and_size_count(tmp_path):
    captioned_corpus(tmp_path / "src")
    m = pack(tmp_path / "src", tmp_path / "out", PackOptions(primary="txt", order="keep"), progress=False)
    assert m.extensions == ["txt"] and m.samples.size.tolist() == [4] * 6  # "a cat number 0": 4 tokens
    assert {m.kind_name(i) for i in range(6)} == {"text"}
    with pytest.raises(PackError, match="field name"):
        PackOptions(primary="Big/Name")


def test_the_mixed_example_corpus_still_gives_30_one_field_samples(tmp_path):
    root = Path(__file__).parents[2] / "examples" / "corpus"
    m = pack(root, tmp_path / "out", progress=False)
    assert (m.num_samples, m.max_fields, len(list(m.skip_records()))) == (30, 1, 0)
    assert sum(m.field_counts()) == 30 and set(m.fields) == set(m.extensions)


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_a_v2_pack_made_by_the_previous_code_opens_with_one_field_per_sample(tmp_path, fmt):
    root = tmp_path / "pack"
    shutil.copytree(DATA / f"v2-{fmt}", root)
    m = open_manifest(root)
    m.validate_rows()
    assert (m.version, m.max_fields, m.fields) == (2, 1, m.extensions)
    assert "fields" not in m.samples.arrays and sum(m.field_counts()) == m.num_samples == 4
    assert m.field_counts() == np.bincount(np.asarray(m.samples.ext), minlength=len(m.extensions)).tolist()


def test_a_v3_field_mask_that_misses_its_primary_or_names_no_field_is_refused(tmp_path):
    captioned_corpus(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "out", progress=False)
    path = tmp_path / "out" / "columns" / "sample_fields.npy"
    for bad in (0b110, 0b1000):
        masks = np.load(path)
        masks[2] = bad
        np.save(path, masks)
        with pytest.raises(ManifestError, match="field mask"):
            open_manifest(tmp_path / "out").validate_rows()
    head = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(dict(head, fields=["jpg", "jpg"])))
    with pytest.raises(ManifestError, match="distinct"):
        open_manifest(tmp_path / "out")


def test_verify_checks_each_record_holds_the_fields_its_mask_lists(tmp_path):
    captioned_corpus(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "out", PackOptions(order="keep"), progress=False)
    assert verify(tmp_path / "out", progress=False).ok
    path = tmp_path / "out" / "columns" / "sample_fields.npy"
    masks = np.load(path)
    masks[0] = 0b101  # cat/000 holds a json too: a valid mask, but not its record's
    np.save(path, masks)
    resync_row_groups(tmp_path / "out")  # the pack says that mask everywhere, row groups included
    with pytest.raises(ManifestError, match="columns: field starts disagree with the samples' field masks"):
        verify(tmp_path / "out", progress=False)  # version 6: each sample has a field row per bit of its mask


def test_the_cli_packs_with_primary_and_require_and_stats_lists_the_fields(tmp_path, corgi):
    captioned_corpus(tmp_path / "src")
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--require", "jpg,json", "--primary", "txt",
                   "--workers", "1")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("(--require jpg,json)") == 4  # the two 001 samples, two files each
    stats = corgi("stats", tmp_path / "out")
    assert "fields: txt (4), jpg (4), json (4)" in stats.stdout
    assert json.loads(corgi("stats", tmp_path / "out", "--json").stdout)["fields"] == {"txt": 4, "jpg": 4, "json": 4}
    refused = corgi("pack", tmp_path / "src", tmp_path / "other", "--require", "J/x")
    assert refused.exit_code == 1 and "field name 'J/x'" in refused.stderr
    assert "files that share a folder and a stem are one sample" in " ".join(corgi("pack", "--help").stdout.split())

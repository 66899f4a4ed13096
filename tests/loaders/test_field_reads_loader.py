"""Reading(fields=...) in CorgiPileDataset (issue 33 §2): the asked fields only, equal to the source files, with
the plan of a whole read (same ids in the same order per rank, balance by the primary's size, resume, blends),
fast batches only where a field read is a whole read, and one-line errors for what cannot be read so.  The
reader itself is tested in tests/reading/test_field_reads.py."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io.errors import ArgumentError, DecodeError
from corgi_io.loaders import (Batches, Blend, Cache, CorgiPileDataset, Ranks, Reading, Shuffle, TokenRows)
from corgi_io.packing import PackOptions, pack
from helpers.corpus_factory import write_image
from helpers.field_packs import captioned_pack
from helpers.packs import text_pack

DATA = Path(__file__).parents[1] / "data"
TXT = Reading(fields=("txt",))


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """(pack, {key: {field: bytes}}): 24 png + txt (+ json) samples in blocks of 6; read-only."""
    return captioned_pack(tmp_path_factory.mktemp("field-loader"))


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    """A second, smaller captioned pack without json, for blends."""
    return captioned_pack(tmp_path_factory.mktemp("field-loader-other"), n=10, block_samples=4, json_too=False)


def test_a_caption_only_epoch_has_each_ranks_samples_in_the_whole_reads_order(packed):
    root, expected = packed
    for rank in (0, 1):
        options = dict(seed=4, ranks=Ranks(rank=rank, world_size=2))
        whole = [s["index"] for s in CorgiPileDataset(root, **options)]
        got = list(CorgiPileDataset(root, **options, reading=TXT))
        assert [s["index"] for s in got] == whole
        assert all(s["txt"] == expected[s["key"]]["txt"] and s["fields"] == ["txt"] and "png" not in s
                   and "json" not in s and s["data"] is s["txt"] for s in got)


def test_workers_read_the_same_samples_and_decode_the_asked_field(packed):
    root, expected = packed
    whole = CorgiPileDataset(root, seed=1)
    ds = CorgiPileDataset(root, seed=1, reading=TXT, decode="text")
    got = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(s["index"] for s in got) == sorted(s["index"] for s in DataLoader(whole, batch_size=None,
                                                                                     num_workers=2))
    assert all(s["data"] == expected[s["key"]]["txt"].decode() and s["kind"] == "text" for s in got)


def test_balanced_batches_are_the_whole_reads_balanced_by_the_primarys_size(packed):
    root, _ = packed
    options = dict(seed=2, ranks=Ranks(balance="size", rank=1, world_size=2), batching=Batches(4))
    whole = [batch["index"].tolist() for batch in CorgiPileDataset(root, **options)]
    batches = list(CorgiPileDataset(root, **options, reading=Reading(fields=("json", "txt"))))
    assert [batch["index"].tolist() for batch in batches] == whole
    assert set(batches[0]) == {"index", "key", "label", "size", "kind", "ext", "data", "json", "txt", "fields"}
    m = CorgiPileDataset(root).manifest
    assert [batch["size"].tolist() for batch in batches] == [np.asarray(m.samples.size)[i].tolist() for i in whole]


def keys_after(root, state, **options) -> list:
    resumed = StatefulDataLoader(CorgiPileDataset(root, **options), batch_size=None, num_workers=0)
    resumed.load_state_dict(state)
    return [batch["index"].tolist() for batch in resumed]


def test_resume_mid_epoch_continues_where_a_whole_or_a_field_read_stopped(packed):
    root, _ = packed
    options = dict(seed=5, batching=Batches(3))
    whole = [batch["index"].tolist() for batch in CorgiPileDataset(root, **options)]
    for saved_with in (Reading(), TXT):  # the plan is the same: a state of either resumes either
        loader = StatefulDataLoader(CorgiPileDataset(root, **options, reading=saved_with), batch_size=None)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        assert keys_after(root, state, **options, reading=TXT) == whole[3:]


def test_a_blend_reads_the_asked_fields_of_each_source_in_the_whole_reads_order(packed, other):
    """Its sources hold different fields (png, json, txt and png, txt): read for their captions, their decoded
    samples batch together."""
    blend = Blend({"a": packed[0], "b": other[0]}, weights={"a": 0.5, "b": 0.5}, samples_per_epoch=30)
    def read(ds) -> list:
        return [(source, int(i)) for batch in ds for source, i in zip(batch["source"], batch["index"])]

    whole = read(CorgiPileDataset(blend, seed=3, batching=Batches(5)))
    got = list(CorgiPileDataset(blend, seed=3, reading=TXT, decode={"txt": "text"}, batching=Batches(5)))
    assert read(got) == whole and {source for source, _ in whole} == {"a", "b"}
    sources = {"a": packed[1], "b": other[1]}
    assert all(text == sources[source][key]["txt"].decode() for batch in got
               for source, key, text in zip(batch["source"], batch["key"], batch["txt"]))


def test_fast_batches_serve_a_one_field_pack_and_never_a_field_read(tmp_path_factory, tmp_path):
    """Asking a one-field pack's field is a whole read (fast batches, the same batches); a pack of one field per
    sample but several fields (images alone, captions alone) read for its captions goes the per-sample way: the
    fast path would have batched every image's bytes."""
    texts = text_pack(tmp_path_factory, "field-fast", [3 + i % 5 for i in range(20)])
    plain, asked = (CorgiPileDataset(texts, seed=0, batching=Batches(4), reading=r) for r in (Reading(), TXT))
    assert plain.fast_batches and asked.fast_batches
    assert [list(b["data"]) for b in asked] == [list(b["data"]) for b in plain]
    for i in range(8):
        if i % 2:
            (tmp_path / "src" / f"t{i}.txt").write_text(f"text {i}")
        else:
            write_image(tmp_path / "src" / f"i{i}.png", 8, 8, seed=i)
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(block_samples=4), progress=False)
    ds = CorgiPileDataset(tmp_path / "pack", seed=0, batching=Batches(4), reading=TXT)
    assert ds.manifest.max_fields == 1 and not ds.fast_batches
    got = {key: data for batch in ds for key, data in zip(batch["key"], batch["data"])}
    assert got == {f"t{i}" if i % 2 else f"i{i}": f"text {i}".encode() if i % 2 else b"" for i in range(8)}


def test_a_decode_error_names_the_field_that_data_holds(packed):
    root, _ = packed
    ds = CorgiPileDataset(root, seed=0, shuffle=Shuffle("none"), reading=TXT, decode="rgb")
    with pytest.raises(DecodeError) as info:
        next(iter(ds))
    m = ds.manifest
    assert info.value.offset == int(m.field_ranges(0, 1, ["txt"]).offset[0]) != int(m.samples.data_offset[0])


@pytest.mark.parametrize("fields", ["txt", (), ("txt", "txt"), ("txt", 3), [""]])
def test_fields_must_be_a_tuple_of_distinct_names(fields):
    with pytest.raises(ArgumentError, match=r"Reading\(fields=\) takes") as info:
        Reading(fields=fields)
    assert "\n" not in str(info.value)
    assert Reading(fields=["txt", "json"]).fields == ("txt", "json")


def test_a_field_the_pack_lacks_is_one_line_naming_the_pack_and_its_fields(packed, other):
    with pytest.raises(ArgumentError) as info:
        CorgiPileDataset(packed[0], reading=Reading(fields=("txt", "caption")))
    assert str(info.value) == f"{packed[0]}: no field 'caption' in this pack (its fields: png, json, txt)"
    with pytest.raises(ArgumentError) as info:  # a blend's source without it
        CorgiPileDataset(Blend({"a": packed[0], "b": other[0]}), reading=Reading(fields=("json",)))
    assert str(info.value) == f"{other[0]}: no field 'json' in this pack (its fields: png, txt)"


def test_a_pack_before_version_6_is_told_to_repack_unless_every_field_is_asked(tmp_path):
    root = tmp_path / "v5"
    shutil.copytree(DATA / "v5-wds", root)
    with pytest.raises(ArgumentError) as info:
        CorgiPileDataset(root, reading=TXT)
    assert "\n" not in str(info.value) and "version-5" in str(info.value) and "repack it" in str(info.value)
    every = Reading(fields=("txt", "png", "json", "jpg"))
    assert [s["index"] for s in CorgiPileDataset(root, reading=every)] == [s["index"] for s in CorgiPileDataset(root)]


def test_token_rows_refuse_a_field_read_and_a_cache_is_warned_about(packed, tmp_path):
    with pytest.raises(ArgumentError, match=r"does not take Reading\(fields=\)"):
        CorgiPileDataset(packed[0], batching=TokenRows(16), reading=TXT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CorgiPileDataset(packed[0], reading=TXT, cache=Cache(tmp_path, 1 << 20))
    assert [str(w.message) for w in caught if "reads past the Cache" in str(w.message)]


@pytest.mark.slow
def test_over_http_a_caption_read_asks_for_captions_only_in_one_multi_range_request_a_block(packed, http_server):
    root, expected = packed
    folder = Path(http_server.root) / "field-reads"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(root, folder)
    before = len(http_server.requests())
    ds = CorgiPileDataset(http_server.url + "field-reads", seed=0, reading=Reading(fields=("json", "txt")))
    got = list(ds)
    assert len(got) == len(expected)
    for sample in got:
        assert {name: sample[name] for name in sample["fields"]} == \
            {name: data for name, data in expected[sample["key"]].items() if name != "png"}
    shards = [r for r in http_server.requests()[before:] if r[1].endswith(".tar")]
    gets = [r for r in shards if r[0] == "GET"]
    m = ds.manifest
    assert len(gets) == len(m.blocks) and all(status == 206 for _, _, status, _ in gets)
    assert sum(sent for *_, sent in gets) < 0.05 * sum(int(s.bytes) for s in m.shards)
    asked = m.field_ranges(fields=["json", "txt"])
    assert int(asked.length.sum()) <= ds.storage.bytes_read <= sum(sent for *_, sent in gets)  # + multipart framing


@pytest.mark.parametrize("fields", [("png", "txt"), ("txt", "png")])
def test_a_blend_asked_for_the_fields_one_source_holds_whole_batches_in_either_order(packed, other, fields):
    """Source b holds exactly png and txt (read whole), a holds json too (read by fields): the same fields either
    way, whatever order they are asked in, so the decoded batches stack."""
    blend = Blend({"a": packed[0], "b": other[0]}, weights={"a": 0.5, "b": 0.5}, samples_per_epoch=30)
    ds = CorgiPileDataset(blend, seed=3, reading=Reading(fields=fields), decode={"txt": "text"}, batching=Batches(5))
    assert sum(len(batch["index"]) for batch in ds) == 30

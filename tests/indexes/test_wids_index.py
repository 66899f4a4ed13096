"""wids' shard list (`corgi index --for wids`): shardindex.json as `widsindex create` writes it, from the manifest alone
(no shard read), and `wids.ShardListDataset` reads every sample of the pack with it, fields equal to the source
files."""
from __future__ import annotations

import json
import warnings

import pytest
from helpers.index_packs import LONG_KEY, captioned_pack

from corgi_io.indexes import wids as wids_index
from corgi_io.indexes import write_indexes
from corgi_io.manifest import open_manifest
from corgi_io.storage.local import LocalStorage


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """(pack folder, {key: {field: bytes}}) of a pack with its shardindex.json (no key past wids' 100 bytes)."""
    out, expected = captioned_pack(tmp_path_factory.mktemp("wids"), long_key=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert write_indexes(out, ["wids"]) == {"wids": ["shardindex.json"]}
    return out, expected


def test_the_shard_list_is_the_manifests_shards_in_order(indexed):
    out, _ = indexed
    manifest = open_manifest(out)
    spec = json.loads((out / "shardindex.json").read_text(encoding="utf-8"))
    assert {k: spec[k] for k in ("__kind__", "wids_version", "name")} == \
        {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "pack"}
    assert spec["shardlist"] == [{"url": s.path, "nsamples": s.samples, "filesize": (out / s.path).stat().st_size}
                                 for s in manifest.shards]
    assert len(spec["shardlist"]) > 2 and sum(s["nsamples"] for s in spec["shardlist"]) == manifest.num_samples


def test_the_shard_list_reads_no_shard(indexed, tmp_path, monkeypatch):
    out, _ = indexed
    storage = LocalStorage(str(out))
    monkeypatch.setattr(LocalStorage, "read_range", lambda *args: pytest.fail("a shard was read"))
    (tmp_path / "pack").mkdir()
    assert wids_index.write(open_manifest(out), storage, str(tmp_path / "pack")) == ["shardindex.json"]
    assert (tmp_path / "pack" / "shardindex.json").read_bytes() == (out / "shardindex.json").read_bytes()


def test_wids_reads_every_sample_with_corgis_shard_list(indexed, tmp_path):
    wids = pytest.importorskip("wids", reason="pip install wids")
    out, expected = indexed
    dataset = wids.ShardListDataset(str(out / "shardindex.json"), cache_dir=str(tmp_path / "wids-cache"),
                                    transformations=[])
    keys = open_manifest(out).keys()
    assert len(dataset) == len(keys) == len(expected)
    for i, key in enumerate(keys):  # wids' sample i is corgi's sample i: the shards keep the manifest's order
        sample = dataset[i]
        fields = {name[1:]: value if isinstance(value, bytes) else value.read() for name, value in sample.items()
                  if name.startswith(".")}
        assert (sample["__key__"], fields) == (key, expected[key])


def test_a_key_that_wids_cannot_read_gets_one_warning_and_the_true_counts(tmp_path):
    out, expected = captioned_pack(tmp_path, long_key=True)
    with pytest.warns(UserWarning) as caught:
        write_indexes(out, "wids")
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    message = str(caught[0].message)
    assert f"1 samples have tar member names that may pass 100 bytes (first: key {LONG_KEY!r})" in message
    spec = json.loads((out / "shardindex.json").read_text(encoding="utf-8"))
    assert sum(shard["nsamples"] for shard in spec["shardlist"]) == len(expected)

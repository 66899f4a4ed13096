"""`corgi pack --overwrite` over a pack with index files: none of the old pack's index files survive (Energon would
take a stale `.nv-meta/` for a prepared folder, wids would trust stale counts), and a new `--index` describes the
new pack; a re-index removes Energon's `.info.json` first, so a crash part-way never pairs it with new files."""
from __future__ import annotations

import fnmatch
import json

import pytest
from helpers.corpus_factory import write_image
from helpers.index_packs import captioned_source

from corgi_io.indexes import energon, write_indexes

FLAGS = ("--workers", "1", "--block-samples", "3", "--shard-bytes", "12k", "--order", "keep")


def small_source(root):
    """Another corpus: 5 images, no captions (one or two shards with FLAGS)."""
    for i in range(5):
        write_image(root / f"img{i}.jpg", 8, 6, seed=100 + i)
    return root


def test_overwrite_removes_the_old_packs_index_files_and_a_new_index_describes_the_new_pack(tmp_path, corgi):
    captioned_source(tmp_path / "src")
    out = tmp_path / "pack"
    first = corgi("pack", tmp_path / "src", out, *FLAGS, "--index", "energon,wids,dali")
    assert first.exit_code == 0, first.stderr
    assert len(list(out.glob("shard-*.tar"))) >= 4 and (out / ".nv-meta" / ".info.json").exists()
    second = corgi("pack", small_source(tmp_path / "other"), out, *FLAGS, "--overwrite")
    assert second.exit_code == 0, second.stderr
    assert not (out / ".nv-meta").exists() and not (out / "shardindex.json").exists()
    assert sorted(path.name for path in out.glob("shard-*") if not path.name.endswith(".tar")) == []
    third = corgi("pack", tmp_path / "other", out, *FLAGS, "--overwrite", "--index", "energon,wids,dali")
    assert third.exit_code == 0, third.stderr
    shards = sorted(path.name for path in out.glob("shard-*.tar"))
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    assert sorted(info["shard_counts"]) == shards and sum(info["shard_counts"].values()) == 5
    wids = json.loads((out / "shardindex.json").read_text())
    assert [entry["url"] for entry in wids["shardlist"]] == shards
    assert sum(entry["nsamples"] for entry in wids["shardlist"]) == 5
    indexes = {name.replace(".tar", ".idx") for name in shards} | {f"{name}.idx" for name in shards}
    assert {path.name for path in out.glob("shard-*.idx")} == indexes


def test_a_reindex_removes_energons_info_json_before_writing_anything(tmp_path, corgi, monkeypatch):
    captioned_source(tmp_path / "src")
    out = tmp_path / "pack"
    assert corgi("pack", tmp_path / "src", out, *FLAGS, "--index", "energon").exit_code == 0
    info = out / ".nv-meta" / ".info.json"

    def crash(*_args):
        assert not info.exists(), "the old .info.json is still there while the new files are written"
        raise OSError("disk full")

    monkeypatch.setattr(energon, "_write_tar_index", crash)
    with pytest.raises(OSError, match="disk full"):
        write_indexes(out, "energon")
    assert not info.exists()


def test_every_index_file_a_module_writes_is_one_an_overwrite_removes(tmp_path):
    """A new reader in INDEX_MODULES whose files lie elsewhere would leave them to describe a replaced pack."""
    from helpers.index_packs import captioned_pack

    from corgi_io.indexes import INDEXES
    from corgi_io.manifest import INDEX_FILES
    from corgi_io.packing.output import SHARD_PATTERN, pack_files

    out, _expected = captioned_pack(tmp_path)
    with pytest.warns(UserWarning):
        written = [path for paths in write_indexes(out, INDEXES).values() for path in paths]
    tops = {path.split("/", 1)[0] for path in written}
    assert tops and all(top in INDEX_FILES or fnmatch.fnmatch(top, SHARD_PATTERN) for top in tops)
    assert {out / top for top in tops} <= set(pack_files(out))

"""`corgi index PACK --for wids,dali` and `corgi pack ... --index wids,dali`: the same index files, a line per reader,
a warning as one line on stderr; a TFRecord pack or an unknown reader is one line and a non-zero exit, before anything
is packed for `corgi pack`.  (An s3:// pack: tests/indexes/test_remote_indexes.py.)"""
from __future__ import annotations

import json

import pytest
from helpers.index_packs import SPACED_KEY, captioned_source

from corgi_io.indexes import dali
from corgi_io.manifest import open_manifest

SMALL = ("--workers", "1", "--block-samples", "3", "--shard-bytes", "12k")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("index-cli") / "src"
    captioned_source(root)
    return root


def index_files(out) -> dict:
    return {path.name: path.read_bytes() for path in sorted(out.iterdir()) if path.suffix in (".idx", ".json")
            and path.name != "manifest.json"}


def test_index_writes_each_readers_files_and_says_so(source, tmp_path, corgi):
    out = tmp_path / "pack"
    assert corgi("pack", source, out, *SMALL).exit_code == 0
    result = corgi("index", out, "--for", "wids,dali")
    assert result.exit_code == 0, result.output
    shards = open_manifest(out).shards
    assert result.stdout.splitlines() == [
        f"wids: wrote 1 file in {out} (shardindex.json)",
        f"dali: wrote {len(shards)} files in {out} (shard-000000.idx, ... {dali.index_path(shards[-1].path)})"]
    wids_warning, dali_warning = result.stderr.splitlines()  # the key past 100 bytes, the key with a space
    assert wids_warning.startswith("corgi index: warning: 1 samples have tar member names that may pass 100 bytes")
    assert dali_warning.startswith("corgi index: warning: 1 of ") and repr(SPACED_KEY) in dali_warning
    assert set(index_files(out)) == {"shardindex.json", *(dali.index_path(s.path) for s in shards)}
    shardlist = json.loads((out / "shardindex.json").read_text())["shardlist"]
    assert [shard["url"] for shard in shardlist] == [shard.path for shard in shards]


def test_pack_index_writes_the_same_files_as_index(source, tmp_path, corgi):
    first, second = tmp_path / "first", tmp_path / "second"
    assert corgi("pack", source, first, *SMALL).exit_code == 0
    assert corgi("index", first, "--for", "dali,wids").exit_code == 0
    result = corgi("pack", source, second, *SMALL, "--index", "wids,dali")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-2].startswith("wids: wrote 1 file in")
    assert "corgi pack: warning: 1 of " in result.stderr
    files = index_files(second)
    assert files.pop("shardindex.json").replace(b'"second"', b'"first"') == index_files(first).pop("shardindex.json")
    assert files == {name: data for name, data in index_files(first).items() if name.endswith(".idx")}


def test_a_tfrecord_pack_is_one_line_naming_the_pack_and_its_format(source, tmp_path, corgi):
    out = tmp_path / "pack"
    assert corgi("pack", source, out, *SMALL, "--format", "tfrecord").exit_code == 0
    result = corgi("index", out, "--for", "dali")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (f"Error: {out}: dali index files are for WebDataset (tar) packs; this pack's format is "
                             f"tfrecord\n")
    refused = corgi("pack", source, tmp_path / "other", *SMALL, "--format", "tfrecord", "--index", "wids")
    assert refused.exit_code == 2 and "--index is for --format wds" in refused.stderr
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("args", [("index", "{out}", "--for", "wids,energy"), ("index", "{out}", "--for", ","),
                                  ("pack", "{src}", "{out}", "--index", "energy")])
def test_an_unknown_reader_is_a_usage_error_naming_the_choices_before_anything_is_written(args, source, tmp_path,
                                                                                           corgi):
    out = tmp_path / "pack"
    result = corgi(*(arg.format(out=out, src=source) for arg in args))
    assert result.exit_code == 2 and "('wids', 'dali', 'energon')" in result.stderr
    assert not out.exists()

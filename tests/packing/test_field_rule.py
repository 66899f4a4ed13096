"""One rule of --require, --primary and --kind (`sample_rules.FieldRule`) for every SOURCE form (issue 30 item 1).

The folder walk (grouping.py) and the sample rules of shard and table units (sample_rules.SampleRules) both call
it: the same samples, given as files of a folder or as members of a tar, are packed with the same primary kind,
and left out for the same reason."""
from __future__ import annotations

import io
import tarfile

import pytest

from corgi_io.errors import CorpusError
from corgi_io.manifest import open_manifest
from corgi_io.packing import PackOptions, pack
from corgi_io.packing.sample_rules import FieldRule, Refused
from helpers.source_shards import jpeg

SAMPLES = {"a": {"jpg": jpeg(8, 8, 1), "txt": b"a caption"}, "b": {"txt": b"only text"},
           "c": {"jpg": jpeg(9, 8, 2)}, "d": {"xyz": b"no kind"}}
OPTIONS = [{}, {"kind": "text"}, {"kind": "image"}, {"primary": "txt"}, {"primary": "txt", "kind": "image"},
           {"require": ("txt",)}, {"kind": "image", "require": ("jpg", "txt")}]


def packed(source, out, options: dict) -> tuple:
    """({key: kind of its primary}, {key or file: reason}) of a pack of `source`."""
    pack(source, out, PackOptions(**options), workers=1, progress=False)
    m = open_manifest(out)
    kinds = {m.key(i): m.kind_name(i) for i in range(m.num_samples)}
    return kinds, {entry["path"]: entry["reason"] for entry in m.skip_records()}


def as_folder(root):
    for key, fields in SAMPLES.items():
        for name, data in fields.items():
            (root / f"{key}.{name}").write_bytes(data)
    return root


def as_tar(root):
    with tarfile.open(root / "part-000.tar", "w") as tar:
        for key, fields in SAMPLES.items():
            for name, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return root


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "auto")
def test_a_folder_and_a_tar_of_the_same_samples_pack_and_skip_them_alike(tmp_path, options):
    (tmp_path / "folder").mkdir()
    (tmp_path / "tars").mkdir()
    try:
        folder_kinds, folder_skips = packed(as_folder(tmp_path / "folder"), tmp_path / "a", options)
    except CorpusError:  # every sample left out: both sides must say so
        with pytest.raises(CorpusError, match="every sample was skipped"):
            packed(as_tar(tmp_path / "tars"), tmp_path / "b", options)
        return
    tar_kinds, tar_skips = packed(as_tar(tmp_path / "tars"), tmp_path / "b", options)
    assert tar_kinds == folder_kinds
    rule = FieldRule(**options)
    for key, fields in SAMPLES.items():
        refused = rule.choose(list(fields))
        if isinstance(refused, Refused):
            assert tar_skips[f"part-000.tar: {key}"] == refused.reason  # named relative to SOURCE
            for name in fields:
                assert folder_skips[f"{key}.{name}"] == rule.file_reason(refused, name, name)


def test_the_rule_decides_from_names_alone():
    assert FieldRule().choose(["txt", "jpg"]) == (1, "image")
    assert FieldRule(kind="image").choose(["bin"]) == (0, "image")  # no field names a kind: taken as --kind
    assert FieldRule(primary="txt", kind="image").choose(["jpg", "txt"]) == \
        Refused("primary", "has no usable primary field 'txt' (--primary)")
    assert FieldRule(require=("txt", "json")).choose(["jpg"]) == \
        Refused("require", "no field 'txt', 'json' (--require txt,json)")
    assert FieldRule(kind="image").choose(["cls"])[0] == "reserved"
    assert FieldRule(kind="text").choose(["jpg"]) == Refused("kind", "has no text field (--kind text)")

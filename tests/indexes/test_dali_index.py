"""DALI's WebDataset index (`corgi index --for dali`): each shard's .idx holds what DALI's `wds2idx` records, read
back from the tars by `tarfile` alone; a key with a space gets one warning and the form DALI reads without names.
A pack with per-field ranges (version 6) is indexed from its manifest without a read; an older one from its tar
headers, one ranged read per block (window by window when larger), and a shard that disagrees with its manifest is
one line naming it.  With `nvidia.dali` installed, `fn.readers.webdataset` reads the pack with these indexes."""
from __future__ import annotations

import itertools
import shutil
import tarfile
from pathlib import Path

import pytest
from helpers.index_packs import LONG_KEY, SPACED_KEY, captioned_pack, tar_members

from corgi_io.errors import FormatError
from corgi_io.indexes import dali, members, write_indexes
from corgi_io.manifest import open_manifest
from corgi_io.storage.local import LocalStorage


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """(pack folder, {key: {field: bytes}}, the warnings write_indexes gave) of a pack indexed for DALI."""
    out, expected = captioned_pack(tmp_path_factory.mktemp("dali"))
    with pytest.warns(UserWarning) as caught:
        written = write_indexes(out, "dali")
    assert written == {"dali": [dali.index_path(shard.path) for shard in open_manifest(out).shards]}
    return out, expected, [str(warning.message) for warning in caught]


def wds2idx_lines(shard, named: bool = True) -> list:
    """The lines DALI's wds2idx writes for `shard`: members grouped by the key before the first dot of their base
    name, each `<field> <offset> <size> <name>`, the offset where the member's data starts (wds2idx reads it from
    GNU tar's block numbers, or from tarfile's position right after the header: both the data offset)."""
    def key(member):
        name = member[0]
        return name[:name.find(".", name.rfind("/") + 1)]

    samples = [list(group) for _, group in itertools.groupby(tar_members(shard), key)]
    def component(name, offset, size):
        return f"{name[len(key((name,))) + 1:]} {offset} {size}" + (f" {name}" if named else "")
    return [f"{'v1.2' if named else 'v1.1'} {len(samples)}"] + [" ".join(component(*m) for m in s) for s in samples]


def test_every_index_holds_what_wds2idx_records(indexed):
    out, expected, _ = indexed
    manifest = open_manifest(out)
    for shard in manifest.shards:
        keys = manifest.keys(shard.first_sample, shard.first_sample + shard.samples)
        named = SPACED_KEY not in keys
        text = (out / dali.index_path(shard.path)).read_text(encoding="utf-8")
        assert text.splitlines() == wds2idx_lines(out / shard.path, named), shard.path
        assert text.endswith("\n") and int(text.split()[1]) == shard.samples
    names = {name for shard in manifest.shards for name, _, _ in tar_members(out / shard.path)}
    assert {f"{LONG_KEY}.jpg", "cat/IMG_0000%2Ev2.txt", "cat/café.jpg"} <= names  # a pax header, a dot, UTF-8


def test_the_indexes_point_at_every_fields_bytes(indexed):
    out, expected, _ = indexed
    samples = []
    for index in sorted(out.glob("*.idx")):
        data = (out / index.name.replace(".idx", ".tar")).read_bytes()
        head, *lines = index.read_text(encoding="utf-8").splitlines()
        step = 4 if head.startswith("v1.2") else 3
        for parts in (line.split(" ") for line in lines):
            assert all(int(offset) % 512 == 0 for offset in parts[1::step])
            samples.append({field: data[int(offset):int(offset) + int(size)]
                            for field, offset, size in zip(parts[0::step], parts[1::step], parts[2::step])})
    assert sorted(sorted(s.items()) for s in samples) == sorted(sorted(f.items()) for f in expected.values())


def test_a_key_with_a_space_gets_one_warning_and_the_form_without_names(indexed):
    out, _, warned = indexed
    manifest = open_manifest(out)
    spaced = next(s for s in manifest.shards if SPACED_KEY in manifest.keys(s.first_sample, s.first_sample + s.samples))
    assert len(warned) == 1 and "\n" not in warned[0]
    assert f"first: {SPACED_KEY!r} in {spaced.path}" in warned[0] and "v1.1" in warned[0] and "1 of " in warned[0]
    lines = (out / dali.index_path(spaced.path)).read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"v1.1 {spaced.samples}"
    for line in lines[1:]:  # DALI's v1.1 parser: `<ext> <offset> <size>` triples split at white space
        tokens = line.split()
        assert len(tokens) % 3 == 0 and all(t.isdigit() for t in tokens[1::3] + tokens[2::3])


@pytest.fixture
def reads(monkeypatch) -> list:
    """The length of every ranged read of a local shard from now on."""
    lengths, read_range = [], LocalStorage.read_range
    monkeypatch.setattr(LocalStorage, "read_range", lambda self, path, offset, length: (
        lengths.append(length), read_range(self, path, offset, length))[1])
    return lengths


def write_dali(out, folder) -> dict:
    """{name: text} of the .idx files `dali.write` writes for the pack `out` into `folder`."""
    with pytest.warns(UserWarning):
        dali.write(open_manifest(out), LocalStorage(str(out)), str(folder))
    return {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.idx")}


def test_a_pack_with_field_ranges_is_indexed_from_its_manifest_alone(indexed, tmp_path, reads):
    out, _, _ = indexed
    assert members.has_field_ranges(open_manifest(out))
    assert write_dali(out, tmp_path) == {p.name: p.read_text(encoding="utf-8") for p in out.glob("*.idx")}
    assert reads == []


def test_the_header_walk_is_one_ranged_read_per_block_or_windows_when_larger(indexed, tmp_path, reads, monkeypatch):
    out, _, _ = indexed
    blocks = open_manifest(out).blocks
    expected = {p.name: p.read_text(encoding="utf-8") for p in out.glob("*.idx")}
    monkeypatch.setattr(members, "has_field_ranges", lambda manifest: False)  # as for a pack before version 6
    (tmp_path / "one").mkdir()
    assert write_dali(out, tmp_path / "one") == expected
    assert len(reads) == len(blocks) and sum(reads) == int(blocks.length.sum())
    reads.clear()
    monkeypatch.setattr(members, "WINDOW", 1024)  # smaller than every block: walked header by header
    (tmp_path / "windows").mkdir()
    assert write_dali(out, tmp_path / "windows") == expected
    assert max(reads) <= 1024 and sum(reads) < int(blocks.length.sum())


def test_a_pack_before_field_ranges_is_indexed_from_its_tar_headers(tmp_path):
    shutil.copytree(Path(__file__).parents[1] / "data" / "v5-wds", tmp_path / "pack")
    out = tmp_path / "pack"
    assert not members.has_field_ranges(open_manifest(out))
    with pytest.warns(UserWarning, match="white space"):
        write_indexes(out, "dali")
    manifest = open_manifest(out)
    shard, = manifest.shards
    named = all(" " not in key for key in manifest.keys())
    assert (out / "shard-000000.idx").read_text(encoding="utf-8").splitlines() == \
        wds2idx_lines(out / shard.path, named)


@pytest.mark.filterwarnings("ignore:.*white space")
def test_a_shard_that_disagrees_with_its_manifest_is_one_line_naming_shard_offset_and_key(indexed, tmp_path,
                                                                                         monkeypatch):
    out, _, _ = indexed
    monkeypatch.setattr(members, "has_field_ranges", lambda manifest: False)  # the tar headers are read
    shutil.copytree(out, tmp_path / "pack")
    manifest = open_manifest(tmp_path / "pack")
    key, shard = manifest.key(1), manifest.shards[int(manifest.samples.shard[1])]
    header = int(manifest.samples.data_offset[1]) - 512  # a ustar header: renamed to another key, checksum intact
    with open(tmp_path / "pack" / shard.path, "r+b") as f:
        f.seek(header)
        info = tarfile.TarInfo.frombuf(f.read(512), "utf-8", "strict")
        info.name = "zz" + info.name[2:]
        f.seek(header)
        f.write(info.tobuf(tarfile.USTAR_FORMAT))
    with pytest.raises(FormatError) as caught:
        write_indexes(tmp_path / "pack", "dali")
    message = str(caught.value)
    assert "\n" not in message and f"byte offset {header}" in message and shard.path in message
    assert repr(key) in message and "does not belong" in message


def test_dali_reads_every_sample_with_corgis_indexes_on_a_cpu_pipeline(indexed):
    dali_fn = pytest.importorskip("nvidia.dali.fn", reason="pip install nvidia-dali-cuda120 (CPU pipelines work "
                                                            "without a GPU)")
    from nvidia.dali import pipeline_def

    out, expected, _ = indexed
    manifest = open_manifest(out)
    paths = [str(out / shard.path) for shard in manifest.shards]
    exts = ["jpg", "txt", "json", "cls"]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def read():
        return tuple(dali_fn.readers.webdataset(paths=paths, index_paths=[str(out / dali.index_path(p.path))
                                                                          for p in manifest.shards],
                                                ext=exts, missing_component_behavior="empty", random_shuffle=False))

    pipe = read()
    pipe.build()
    got = []
    for _ in range(manifest.num_samples):
        outputs = pipe.run()
        got.append({ext: outputs[i].at(0).tobytes() for i, ext in enumerate(exts)})
    want = [{ext: expected[key].get(ext, b"") for ext in exts} for key in manifest.keys()]
    assert got == want

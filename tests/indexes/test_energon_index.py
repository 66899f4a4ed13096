"""Megatron-Energon's prepared dataset (`corgi index --for energon`): every `.tar.idx` and every row of
`.nv-meta/index.sqlite` is what `energon prepare` records, read back from the tars by `tarfile` as its
`_preprocess_tar` reads them; `.info.json`, `split.yaml`, `dataset.yaml` (kept when there) and `index.uuid`; a key
two samples share is one line; with `megatron.energon` installed, its `get_train_dataset` and `get_loader` read every
sample of the pack, fields equal to the source files, without `energon prepare`."""
from __future__ import annotations

import io
import itertools
import json
import re
import sqlite3
import struct
import tarfile

import pytest
from helpers.index_packs import captioned_pack

from corgi_io.errors import ArgumentError
from corgi_io.indexes import energon, members, write_indexes
from corgi_io.manifest import open_manifest
from corgi_io.packing import PackOptions, pack

SPLIT_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # Energon's split_name_re: key, then part after the dot


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """(pack folder, {key: {field: bytes}}) of a pack prepared for Energon by corgi."""
    out, expected = captioned_pack(tmp_path_factory.mktemp("energon"))
    written = write_indexes(out, "energon")["energon"]
    assert {".nv-meta/index.sqlite", ".nv-meta/.info.json", ".nv-meta/split.yaml", ".nv-meta/dataset.yaml",
            ".nv-meta/index.uuid"} < set(written)
    return out, expected


def prepare_records(shard) -> tuple:
    """(.tar.idx offsets, samples rows, sample_parts rows) as `energon prepare` makes them from one tar (tar id 0)."""
    offsets, samples, parts = [], [], []
    with tarfile.open(shard) as archive:
        named = ((m, *SPLIT_NAME.match(m.name).groups()) for m in archive if m.isreg() and SPLIT_NAME.match(m.name))
        for index, (key, group) in enumerate(itertools.groupby(named, lambda entry: entry[1])):
            group = list(group)
            offsets.append(group[0][0].offset)
            samples.append([0, key, index, group[0][0].offset])
            parts += [(0, index, part, member.offset_data, member.size) for member, _, part in group]
        offsets.append(archive.offset)
    ends = offsets[1:]
    return offsets, [(*row, end - row[3]) for row, end in zip(samples, ends)], parts


def rows(out, table: str, shard: int) -> list:
    with sqlite3.connect(out / ".nv-meta" / "index.sqlite") as db:
        found = db.execute(f"SELECT * FROM {table} WHERE tar_file_id = ? ORDER BY rowid", (shard,)).fetchall()
    return [(0, *row[1:]) for row in found]


def test_every_tar_index_and_sqlite_row_is_what_energon_prepare_records(indexed):
    out, _ = indexed
    manifest = open_manifest(out)
    assert len(manifest.shards) > 3
    for number, shard in enumerate(manifest.shards):
        offsets, samples, parts = prepare_records(out / shard.path)
        data = (out / energon.tar_index_path(shard.path)).read_bytes()
        assert list(struct.unpack(f"<{len(data) // 8}Q", data)) == offsets, shard.path
        assert rows(out, "samples", number) == samples and rows(out, "sample_parts", number) == parts, shard.path
    with sqlite3.connect(out / ".nv-meta" / "index.sqlite") as db:
        indexes = {name for name, in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"idx_samples_by_tar_and_idx", "idx_sample_parts_seq", "idx_sample_parts_full"} <= indexes


def test_the_metadata_names_every_shard_in_the_manifests_order(indexed):
    yaml = pytest.importorskip("yaml", reason="pip install pyyaml")
    out, _ = indexed
    shards = open_manifest(out).shards
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    assert list(info["shard_counts"].items()) == [(s.path, s.samples) for s in shards]
    assert yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text()) == \
        {"split_parts": {"train": [s.path for s in shards]}, "exclude": []}
    assert yaml.safe_load((out / ".nv-meta" / "dataset.yaml").read_text()) == \
        {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    assert re.fullmatch(r"[0-9a-f-]{36}", (out / ".nv-meta" / "index.uuid").read_text())


def test_a_users_dataset_yaml_is_kept_and_the_header_walk_gives_the_same_index(indexed, tmp_path, monkeypatch):
    out, _ = indexed
    (tmp_path / ".nv-meta").mkdir()
    (tmp_path / ".nv-meta" / "dataset.yaml").write_text("sample_type: mine\n")
    monkeypatch.setattr(members, "has_field_ranges", lambda manifest: False)  # as for a pack before version 6
    from corgi_io.storage.local import LocalStorage

    energon.write(open_manifest(out), LocalStorage(str(out)), str(tmp_path))
    assert (tmp_path / ".nv-meta" / "dataset.yaml").read_text() == "sample_type: mine\n"
    for table in ("samples", "sample_parts"):
        assert all(rows(tmp_path, table, i) == rows(out, table, i) for i in range(len(open_manifest(out).shards)))
    assert sorted(p.name for p in tmp_path.glob("*.tar.idx")) == sorted(p.name for p in out.glob("*.tar.idx"))
    assert all((tmp_path / p.name).read_bytes() == p.read_bytes() for p in out.glob("*.tar.idx"))


def test_a_key_two_samples_share_is_one_line_naming_it(tmp_path):
    (tmp_path / "src").mkdir()
    for name in ("a", "b"):  # two source tars that number their samples alike: both keep "s/000"
        with tarfile.open(tmp_path / "src" / f"{name}.tar", "w") as tar:
            for key in (f"s/{name}", "s/000"):  # the repeat second: the key named is the repeated one
                data = f"text of {key} in {name}".encode()
                info = tarfile.TarInfo(f"{key}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(source_form="wds"), workers=1, progress=False)
    with pytest.raises(ArgumentError) as caught:
        write_indexes(tmp_path / "pack", "energon")
    message = str(caught.value)
    assert "\n" not in message and "key 's/000'" in message and "Energon needs every key once" in message
    assert not (tmp_path / "pack" / ".nv-meta" / "index.sqlite").exists()
    assert not (tmp_path / "pack" / ".nv-meta" / ".info.json").exists()


def test_energon_reads_every_sample_without_energon_prepare(indexed):
    pytest.importorskip("megatron.energon", reason="pip install megatron-energon")
    from megatron.energon import Cooker, DefaultTaskEncoder, WorkerConfig, get_loader, get_train_dataset, stateless

    @stateless
    def keep(sample: dict) -> dict:
        return sample

    class Raw(DefaultTaskEncoder):
        decoder = None  # the fields' bytes as packed
        cookers = [Cooker(keep)]

        def batch(self, samples):
            return samples

        def encode_batch(self, batch):
            return batch

    out, expected = indexed
    dataset = get_train_dataset(str(out), split_part="train", batch_size=1, task_encoder=Raw(),
                                worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
                                shuffle_buffer_size=None, max_samples_per_sequence=None)
    seen = {}
    for batch in itertools.islice(get_loader(dataset), len(dataset)):
        for sample in batch:
            seen[sample["__key__"]] = {name: value for name, value in sample.items() if not name.startswith("__")}
    assert seen == expected

"""`corgi pack` over existing shards and tables (--from wds|tfrecord|parquet|jsonl): a task per unit, fields kept,
skips recorded, the same bytes whatever the workers, and a resume after a kill that gives the same bytes."""
from __future__ import annotations

import io
import itertools
import json
import tarfile
from pathlib import Path

import pytest
import webdataset as wds

from corgi_io.cli import main
from corgi_io.manifest import open_manifest
from helpers.packs import all_files
from helpers.processes import pack_killed_before_op
from helpers.source_shards import jpeg, pack_args, stock_samples, write_tars


def test_tars_repack_into_the_same_samples_with_their_fields(tmp_path, corgi):
    source = write_tars(tmp_path / "tars")
    result = corgi(*pack_args(tmp_path / "tars", tmp_path / "out", "--workers", 1))
    assert result.exit_code == 0, result.stderr
    assert corgi("verify", tmp_path / "out").exit_code == 0
    got = stock_samples(tmp_path / "out")
    assert set(got) == set(source)
    for key, sample in source.items():
        assert got[key] == {name: value for name, value in sample.items() if name != "__key__"}
    manifest = open_manifest(tmp_path / "out")
    assert manifest.num_samples == 18 and manifest.fields == ["jpg", "txt"]
    labels = dict(zip(manifest.keys(), manifest.samples.label.tolist()))
    assert all(labels[key] == (int(s["cls"]) if "cls" in s else -1) for key, s in source.items())
    assert [shard.path for shard in manifest.shards][:1] == ["shard-000000-0000.tar"]


def test_the_bytes_do_not_depend_on_the_workers(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    write_tars(tmp_path / "tars", tars=4)
    for workers in (1, 2):
        main(pack_args(tmp_path / "tars", tmp_path / f"w{workers}", "--workers", workers), standalone_mode=False)
    assert all_files(tmp_path / "w1") == all_files(tmp_path / "w2")


def test_a_tfrecord_source_maps_features_to_fields(tmp_path, corgi):
    from tfrecord import TFRecordWriter

    (tmp_path / "records").mkdir()
    writer = TFRecordWriter(str(tmp_path / "records" / "train-0.tfrecord"))
    for i in range(5):
        writer.write({"image/encoded": (jpeg(20, 10, i), "byte"), "image/text": (f"text {i}".encode(), "byte"),
                      "image/class/label": (i, "int")})
    writer.close()
    result = corgi(*pack_args(tmp_path / "records", tmp_path / "out", "--workers", 1, "--format", "tfrecord",
                              "--features", "jpg=image/encoded,txt=image/text,label=image/class/label"))
    assert result.exit_code == 0, result.stderr
    manifest = open_manifest(tmp_path / "out")
    assert manifest.keys() == [f"train-0/{i}" for i in range(5)]
    assert manifest.samples.label.tolist() == list(range(5)) and manifest.samples.size.tolist() == [200] * 5
    from tfrecord import tfrecord_loader

    first = next(iter(tfrecord_loader(str(tmp_path / "out" / manifest.shards[0].path), None)))
    assert bytes(first["txt"]) == b"text 0" and bytes(first["data"]) == jpeg(20, 10, 0)


def test_a_parquet_source_packs_each_row_group_as_a_unit(tmp_path, corgi):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    (tmp_path / "table").mkdir()
    pq.write_table(pa.table({"image": [{"bytes": jpeg(8, 8, i)} for i in range(5)],
                             "caption": [f"row {i}" for i in range(5)], "label": [i % 2 for i in range(5)]}),
                   tmp_path / "table" / "t.parquet", row_group_size=2)
    result = corgi(*pack_args(tmp_path / "table", tmp_path / "out", "--workers", 1,
                              "--columns", "jpg=image.bytes,txt=caption,label=label"))
    assert result.exit_code == 0, result.stderr
    manifest = open_manifest(tmp_path / "out")
    assert manifest.keys() == [f"t/{i}" for i in range(5)]
    assert [shard.path for shard in manifest.shards] == [f"shard-00000{u}-0000.tar" for u in range(3)]
    assert stock_samples(tmp_path / "out")["t/3"] == {"jpg": jpeg(8, 8, 3), "txt": b"row 3", "cls": b"1"}


def test_a_jsonl_source_with_inline_text_is_tokenised(tmp_path, corgi, tiny_tokenizer):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"id": f"doc{i}", "text": "the cat sat " * (i + 1)}) + "\n"
                                                 for i in range(4)))
    result = corgi(*pack_args(tmp_path / "rows.jsonl", tmp_path / "out", "--from", "jsonl", "--workers", 1,
                              "--columns", "key=id,txt=text", "--tokenizer", tiny_tokenizer))
    assert result.exit_code == 0, result.stderr
    manifest = open_manifest(tmp_path / "out")
    assert manifest.keys() == [f"doc{i}" for i in range(4)] and manifest.fields == ["txt", "tokens.npy"]
    sizes = manifest.samples.size.tolist()
    assert sizes == sorted(sizes) and sizes[0] > 0
    assert {manifest.extensions[e] for e in manifest.samples.ext.tolist()} == {"tokens.npy"}


@pytest.fixture
def tiny_tokenizer(tmp_path) -> Path:
    """A word-level tokenizer trained here, offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["the cat sat"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    return tmp_path / "tokenizer.json"


def test_bad_members_and_rule_skips_are_recorded_with_the_tar(tmp_path, corgi):
    tars = tmp_path / "tars"
    write_tars(tars, tars=1)
    with tarfile.open(tars / "part-001.tar", "w") as tar:
        for name, data in (("../evil.jpg", jpeg(4, 4, 0)), ("ok.txt", b"text only"), ("big.jpg", jpeg(60, 60, 1))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = corgi(*pack_args(tars, tmp_path / "out", "--workers", 1, "--require", "jpg", "--max-pixels", 3000))
    assert result.exit_code == 0, result.stderr
    skipped = list(open_manifest(tmp_path / "out").skip_records())
    bad = "part-001.tar"  # named relative to SOURCE, as a folder's files are
    assert [entry["path"] for entry in skipped] == [bad, f"{bad}: ok", f"{bad}: big"]
    assert "'..'" in skipped[0]["reason"] and not skipped[0]["reason"].startswith(bad)  # the tar named once
    assert skipped[1]["reason"] == "no field 'jpg' (--require jpg)"  # FieldRule's text, the folder walk's too
    assert "--max-pixels" in skipped[2]["reason"]
    strict = corgi(*pack_args(tars, tmp_path / "strict", "--workers", 1, "--max-pixels", 3000, "--strict"))
    assert strict.exit_code == 1 and len(strict.stderr.strip().splitlines()) == 1 and bad in strict.stderr


@pytest.mark.parametrize("extra, message", [
    (("--from", "tfrecord"), "needs --features"),
    (("--size-fn", "os.path:getsize"), "--size-fn does not apply to a wds SOURCE"),
    (("--columns", "jpg=a"), "--features/--columns does not apply to a wds SOURCE"),
])
def test_options_a_source_cannot_use_fail_in_one_line(tmp_path, corgi, extra, message):
    write_tars(tmp_path / "tars", tars=1)
    result = corgi(*pack_args(tmp_path / "tars", tmp_path / "out", *extra))
    assert result.exit_code != 0 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_folder_mixing_tars_and_raw_files_asks_for_from(tmp_path, corgi):
    write_tars(tmp_path / "src", tars=1)
    (tmp_path / "src" / "cat.jpg").write_bytes(jpeg(4, 4, 1))
    result = corgi(*pack_args(tmp_path / "src", tmp_path / "out"))
    assert result.exit_code == 1 and "choose a form with from_" in result.stderr
    assert corgi(*pack_args(tmp_path / "src", tmp_path / "out", "--from", "wds", "--workers", 1)).exit_code == 0
    assert open_manifest(tmp_path / "out").num_samples == 6


def test_a_glob_names_some_tars(tmp_path, corgi):
    write_tars(tmp_path / "tars", tars=3)
    assert corgi(*pack_args(str(tmp_path / "tars" / "part-00[02].tar"), tmp_path / "out", "--workers", 1)).exit_code == 0
    assert {key[:2] for key in open_manifest(tmp_path / "out").keys()} == {"00", "02"}


def assert_every_kill_resumes(tmp_path, extra=()) -> int:
    """Kill a pack of tmp_path/tars before each of its file-system operations in turn, rerun it each time, and check
    OUTPUT equals an uninterrupted pack's, byte for byte; returns the number of operations."""
    main(pack_args(tmp_path / "tars", tmp_path / "reference", "--workers", 1, *extra), standalone_mode=False)
    reference = all_files(tmp_path / "reference")
    for op in itertools.count(1):
        args = pack_args(tmp_path / "tars", tmp_path / f"op{op}", "--workers", 1, *extra)
        killed = pack_killed_before_op(args, op)
        if killed:
            main(args, standalone_mode=False)
        assert all_files(tmp_path / f"op{op}") == reference, f"killed before operation {op}"
        if not killed:
            return op - 1


@pytest.mark.slow  # forks a pack per file-system operation
def test_kill_before_every_file_operation_then_rerun_gives_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    write_tars(tmp_path / "tars", tars=3)
    operations = assert_every_kill_resumes(tmp_path)
    assert operations > 20, "a pack of three tars makes more file-system operations than that"


def test_dedup_leaves_out_later_copies_across_tars(tmp_path, corgi):
    write_tars(tmp_path / "tars", tars=2)
    with wds.TarWriter(str(tmp_path / "tars" / "part-009.tar")) as writer:  # copies of two earlier images, new keys
        writer.write({"__key__": "copy-a", "jpg": jpeg(16, 12, 0), "txt": b"other caption"})
        writer.write({"__key__": "copy-b", "jpg": jpeg(17, 13, 10), "txt": b"another"})
        writer.write({"__key__": "fresh", "jpg": jpeg(40, 40, 99), "txt": b"new"})
    result = corgi(*pack_args(tmp_path / "tars", tmp_path / "out", "--workers", 1, "--dedup"))
    assert result.exit_code == 0, result.stderr
    manifest = open_manifest(tmp_path / "out")
    assert "copy-a" not in manifest.keys() and "copy-b" not in manifest.keys() and "fresh" in manifest.keys()
    dups = [entry["path"] for entry in list(manifest.skip_records()) if "--dedup" in entry["reason"]]
    assert dups == [f"part-009.tar: copy-{c}" for c in "ab"]  # relative to SOURCE
    assert manifest.num_samples == 12 + 1 and manifest.options["dedup"] is True
    assert "2 duplicates removed by --dedup" in corgi("stats", tmp_path / "out").stdout


@pytest.mark.slow  # forks a pack per file-system operation
def test_kill_during_a_dedup_pack_then_rerun_gives_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    write_tars(tmp_path / "tars", tars=2)
    with wds.TarWriter(str(tmp_path / "tars" / "part-009.tar")) as writer:
        writer.write({"__key__": "copy", "jpg": jpeg(16, 12, 0), "txt": b"x"})
    assert assert_every_kill_resumes(tmp_path, ("--dedup",)) > 20


def test_a_key_in_two_tars_is_packed_twice_with_a_warning(tmp_path, corgi):
    (tmp_path / "tars").mkdir()
    for t in range(2):
        with wds.TarWriter(str(tmp_path / "tars" / f"{t}.tar")) as writer:
            for i in range(3):
                writer.write({"__key__": f"{i:06d}", "txt": f"tar {t} sample {i}".encode()})
    result = corgi(*pack_args(tmp_path / "tars", tmp_path / "out", "--workers", 1))
    assert result.exit_code == 0, result.stderr
    assert "key '000000' names two samples (of units 0 and 1" in result.stderr
    assert open_manifest(tmp_path / "out").num_samples == 6
    unique = corgi(*pack_args(str(tmp_path / "tars" / "0.tar"), tmp_path / "one", "--workers", 1))
    assert unique.exit_code == 0 and "names two samples" not in unique.stderr

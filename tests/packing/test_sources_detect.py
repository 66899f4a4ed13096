"""packing.sources: which form a SOURCE is (pure), its units, and the shared label/key/mapping checks."""
from __future__ import annotations

import pickle

import pytest

from corgi_io.errors import ArgumentError, BadInput, CorpusError
from corgi_io.packing.sources.forms import detect
from corgi_io.packing.sources.unit_list import Unit, list_units
from corgi_io.packing.sources.values import check_field_mapping, check_label, checked_key, skip_or_raise


@pytest.mark.parametrize("source, form", [
    ("a.tar", "wds"), ("a.TAR.GZ", "wds"), ("a.tgz", "wds"), ("x.tfrecord", "tfrecord"),
    ("t.parquet", "parquet"), ("list.csv", "listing"), ("list.jsonl", "listing"),
])
def test_one_file_is_its_suffix(source, form):
    assert detect(source) == form


@pytest.mark.parametrize("names, form", [
    (["a.tar", "b.tar.gz", ".DS_Store"], "wds"),
    (["x-0.tfrecord", "x-0.tfrecord.index", "x-1.tfrecord"], "tfrecord"),
    (["p.parquet"], "parquet"),
    (["cat/", "dog/"], "folder"),
    (["cat/", "readme.txt"], "folder"),
    ([], "folder"),
])
def test_a_folder_is_the_form_of_its_files(names, form):
    assert detect("src", names) == form


@pytest.mark.parametrize("names", [["a.tar", "b.parquet"], ["a.tar", "notes.txt"], ["a.tar", "cat/"]])
def test_a_folder_mixing_forms_asks_for_from(names):
    with pytest.raises(CorpusError, match=r"^src: holds .* choose a form with from_"):
        detect("src", names)


def test_from_forces_the_form_and_is_checked():
    assert detect("src", ["a.tar", "notes.txt"], from_="folder") == "folder"
    assert detect("weird.bin", None, from_="tfrecord") == "tfrecord"
    with pytest.raises(ArgumentError, match="from_ must be one of"):
        detect("src", [], from_="zip")
    with pytest.raises(CorpusError, match="^weird.bin: neither a listing"):
        detect("weird.bin")


def test_units_of_a_folder_are_its_shards_sorted(tmp_path):
    for name in ("b.tar", "a.tar", ".hidden.tar"):
        (tmp_path / name).write_bytes(b"")
    assert list_units(str(tmp_path)) == [Unit("wds", str(tmp_path / "a.tar")), Unit("wds", str(tmp_path / "b.tar"))]
    assert list_units(str(tmp_path / "a.tar")) == [Unit("wds", str(tmp_path / "a.tar"))]


def test_units_refuse_what_walk_reads_and_what_is_missing(tmp_path):
    (tmp_path / "cat").mkdir()
    with pytest.raises(CorpusError, match="is a folder SOURCE, which packing.walk reads"):
        list_units(str(tmp_path))
    with pytest.raises(CorpusError, match="no such file or folder"):
        list_units(str(tmp_path / "missing.tar"))


def test_a_unit_is_small_and_picklable():
    unit = Unit("parquet", "s3://bucket/t.parquet", 3, 3000, 1000)
    assert pickle.loads(pickle.dumps(unit)) == unit
    assert len(pickle.dumps(unit)) < 200


def test_labels_keys_and_mappings_are_checked():
    assert check_label(b" 7\n") == 7 and check_label(3) == 3 and check_label("12") == 12
    for bad in (b"-1", b"x", b"99999999999", -2, 2 ** 31, True, 1.0, "٣"):
        with pytest.raises(BadInput, match="is not an integer from 0 to 2147483647"):
            check_label(bad)
    assert checked_key("a/b") == "a/b"
    with pytest.raises(BadInput, match=r"key '\.\./a' has a '\.\.' component"):
        checked_key("../a")
    assert check_field_mapping("columns", {"jpg": "x", "label": "y"}, "column name")
    for bad in ({}, {"label": "y"}, {"JPG": "x"}, {"jpg": ""}, ["jpg"]):
        with pytest.raises(ArgumentError):
            check_field_mapping("columns", bad, "column name")


def test_a_skip_warns_one_line_on_stderr_by_default_and_raises_under_strict(capsys):
    skip_or_raise("t.tar: member 'x': why", False, None)
    assert capsys.readouterr().err == "corgi pack: warning: skipped t.tar: member 'x': why\n"
    with pytest.raises(BadInput, match="^t.tar: member 'x': why$"):
        skip_or_raise("t.tar: member 'x': why", True, None)

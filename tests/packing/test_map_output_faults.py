"""What a user's --map returns is checked like any input, and a map that crashes, hangs or exits stops the pack
with one line (issue 28: defects 2, 4, 9 and 11).

* reserved field names (the loader's sample keys, the label member, the TFRecord features, a blend's `source`) are
  refused after the transforms, whatever the source and format: a fresh pack always passes `corgi verify`;
* --max-sample-bytes applies to what the map returns; a block's map output is written as it comes, not held;
* a worker that dies (os._exit, a segfault) or a map that hangs past --map-timeout fails the pack with one line
  naming the sample; SystemExit in a map is that sample's failure, never a silent exit 0;
* bytes-like values are taken as bytes; a pack that skips every sample says so in one line, writing no manifest.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from corgi_io.errors import BadInput, CorpusError, PackError
from corgi_io.manifest import open_manifest
from corgi_io.packing import PackOptions, pack
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.user_map import UserMap
from helpers.corpus_factory import write_image, write_listing
from helpers.processes import CLI
from helpers.source_shards import jpeg, stock_samples, write_tars

# the loader's sample keys, the label member, the TFRecord features, and the `source` a blend adds
RESERVED_NAMES = ("cls", "data", "ext", "fields", "index", "key", "kind", "label", "size", "source")
MAP_MODULE = '''
import ctypes, os, sys, time

NAME = {name!r}

def tainted(key):
    return int(key[-1]) % 2 == 0

def add_reserved(fields, key):
    """The reserved field on every other sample (keys end in a digit): the others pack as they are."""
    return {{**fields, NAME: b"7"}} if tainted(key) else fields

def exits(fields, key):
    if tainted(key):
        sys.exit(0)
    return fields

def exits_always(fields, key):
    sys.exit()

def os_exit(fields, key):
    os._exit(3)

def segfault(fields, key):
    ctypes.string_at(0)

def hangs(fields, key):
    time.sleep(600)

def views(fields, key):
    return {{name: memoryview(np_view(value)) for name, value in fields.items()}}

def np_view(value):
    import numpy
    return numpy.frombuffer(value, dtype=numpy.uint8)

def big(fields, key):
    return {{**fields, "npy": bytes([int(key[-1])]) * (30 << 20)}}

def nothing(fields, key):
    return None
'''


@pytest.fixture
def user_map(write_user_module, monkeypatch):
    """`user_map(name)`: the module `corgi_map_faults` (NAME = name), importable here and by a CLI subprocess."""
    def write(name: str = "data") -> str:
        folder = write_user_module("corgi_map_faults", MAP_MODULE.format(name=name))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
        return "corgi_map_faults"
    return write


def make_source(form: str, root: Path, count: int = 6) -> tuple:
    """(SOURCE, its pack options) of `count` JPEG samples whose keys end in 0..count-1, in `form`."""
    if form in ("folder", "listing"):
        paths = [root / "images" / "c" / f"{i}.jpg" for i in range(count)]
        for i, path in enumerate(paths):
            write_image(path, 8 + i, 8)
        if form == "folder":
            return root / "images", ()
        write_listing(root / "list.csv", paths)
        return root / "list.csv", ()
    if form == "wds":
        write_tars(root / "tars", tars=1, per_tar=count)
        return root / "tars", ()
    if form == "tfrecord":
        from tfrecord import TFRecordWriter

        (root / "records").mkdir()
        writer = TFRecordWriter(str(root / "records" / "train-0.tfrecord"))
        for i in range(count):
            writer.write({"image/encoded": (jpeg(8 + i, 8, i), "byte")})
        writer.close()
        return root / "records", ("--features", "jpg=image/encoded")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "table").mkdir()
    pq.write_table(pa.table({"image": [{"bytes": jpeg(8 + i, 8, i)} for i in range(count)]}),
                   root / "table" / "t.parquet")
    return root / "table", ("--columns", "jpg=image.bytes")


def corgi(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """The corgi CLI in a subprocess (a map that kills its process must not take pytest with it)."""
    return subprocess.run([sys.executable, "-c", CLI, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def one_error_line(run: subprocess.CompletedProcess) -> str:
    """The run's one `Error: ...` line; asserts it failed with nothing else but warnings on stderr."""
    lines = [line for line in run.stderr.splitlines() if not line.startswith("corgi pack: warning:")]
    assert run.returncode != 0 and len(lines) == 1 and lines[0].startswith("Error: "), run.stderr
    return lines[0]


# --- reserved names: one check of the final fields, for every pipeline -------------------------------------------

@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_every_reserved_name_is_refused_in_the_output_but_the_primary_may_be_named_data(name):
    from corgi_io.packing.sample_rules import check_fields

    with pytest.raises(BadInput, match=f"field '{name}' is reserved"):
        check_fields({"jpg": b"x", name: b"7"}, "jpg", 100)
    check_fields({name: b"x"} if name != "cls" else {"jpg": b"x"}, name, 100)  # the primary is loaded as `data`
    with pytest.raises(BadInput, match="'cls' is reserved"):
        check_fields({"cls": b"x"}, "cls", 100)  # a WebDataset label member's name


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_a_map_that_adds_a_reserved_field_skips_its_sample_with_the_reason(user_map, name):
    from corgi_io.packing.sample_rules import OutputRules

    rules = OutputRules.of(PackOptions(map_function=f"{user_map(name)}:add_reserved"))
    with pytest.raises(BadInput, match=f"^after the transforms: {re.escape(reserved_reason_of(name))}$"):
        rules.apply(PackSample("k/0", 1, {"jpg": jpeg(8, 8, 0)}), "jpg", "image", 64)
    assert rules.apply(PackSample("k/1", 1, {"jpg": jpeg(8, 8, 0)}), "jpg", "image", 64)[2] == {"jpg": jpeg(8, 8, 0)}


def reserved_reason_of(name: str) -> str:
    return f"field {name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})"


@pytest.mark.slow
@pytest.mark.parametrize("form", ["folder", "listing", "wds", "tfrecord", "parquet"])
@pytest.mark.parametrize("fmt, name", [("wds", "cls"), ("tfrecord", "data"), ("wds", "source")])
def test_a_fresh_pack_passes_verify_whatever_the_map_returns(tmp_path, user_map, form, fmt, name):
    source, args = make_source(form, tmp_path)
    run = corgi("pack", source, tmp_path / "out", "--format", fmt, "--map", f"{user_map(name)}:add_reserved",
                "--workers", 1, *args)
    assert run.returncode == 0, run.stderr
    manifest = open_manifest(tmp_path / "out")
    assert sorted(key[-1] for key in manifest.keys()) == ["1", "3", "5"]
    assert {entry["reason"] for entry in list(manifest.skip_records())} == {f"after the transforms: {reserved_reason_of(name)}"}
    verify = corgi("verify", tmp_path / "out")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    if fmt == "wds":  # stock webdataset raised "duplicate file name" on a second .cls member
        assert all(fields.get(name) != b"7" for fields in stock_samples(tmp_path / "out").values())


@pytest.mark.slow
def test_every_transform_at_once_still_passes_verify(tmp_path, user_map):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["the cat sat"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    for i in range(6):
        write_image(tmp_path / "src" / "c" / f"{i}.png", 40, 20)
        (tmp_path / "src" / "c" / f"{i}.txt").write_text("the cat sat")
    run = corgi("pack", tmp_path / "src", tmp_path / "out", "--map", f"{user_map('kind')}:add_reserved",
                "--image-max-side", 16, "--image-format", "jpeg", "--tokenizer", tmp_path / "tokenizer.json",
                "--format", "tfrecord", "--workers", 2)
    assert run.returncode == 0, run.stderr
    assert open_manifest(tmp_path / "out").fields == ["jpg", "txt", "tokens.npy"]
    assert corgi("verify", tmp_path / "out").returncode == 0


# --- a map that exits, dies or hangs ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("form", ["folder", "wds"])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("function, how", [("os_exit", "exited with code 3"),
                                           ("segfault", "was killed by signal SIGSEGV")])
def test_a_worker_that_dies_fails_the_pack_in_one_line_naming_its_sample(tmp_path, user_map, form, workers,
                                                                          function, how):
    source, args = make_source(form, tmp_path)
    run = corgi("pack", source, tmp_path / "out", "--map", f"{user_map()}:{function}", "--workers", workers, *args)
    line = one_error_line(run)
    assert "worker process" in line and how in line and "no manifest written" in line, line
    named = r"Error: sample 'c/(\d)' of c/\1\.jpg: " if form == "folder" else r"Error: sample #0 of \S+/part-000\.tar: "
    assert re.match(named + "worker process ", line), line  # a source's sample by its number in the unit
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("form, workers", [("folder", 1), ("wds", 2)])
def test_a_map_that_hangs_fails_after_the_map_timeout_naming_its_sample(tmp_path, user_map, form, workers):
    source, args = make_source(form, tmp_path)
    run = corgi("pack", source, tmp_path / "out", "--map", f"{user_map()}:hangs", "--map-timeout", 1,
                "--workers", workers, *args, timeout=60)
    line = one_error_line(run)
    assert line.startswith("Error: sample '" if form == "folder" else "Error: sample #"), line
    assert "ran longer than --map-timeout 1 s" in line, line
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("form", ["folder", "wds"])
def test_sys_exit_in_a_map_skips_that_sample_and_never_ends_the_pack_silently(tmp_path, user_map, form):
    source, args = make_source(form, tmp_path)
    run = corgi("pack", source, tmp_path / "out", "--map", f"{user_map()}:exits", "--workers", 1, *args)
    assert run.returncode == 0, run.stderr
    manifest = open_manifest(tmp_path / "out")
    assert sorted(key[-1] for key in manifest.keys()) == ["1", "3", "5"]
    assert all("raised SystemExit" in entry["reason"] for entry in list(manifest.skip_records()))
    every = corgi("pack", source, tmp_path / "every", "--map", f"{user_map()}:exits_always", *args)
    line = one_error_line(every)
    assert "the corpus is empty (every sample was skipped: 6 skipped, first: " in line and "SystemExit" in line
    assert not (tmp_path / "every" / "manifest.json").exists()


# --- bytes-like values, --max-sample-bytes, memory ------------------------------------------------------------------

def test_bytes_like_values_are_taken_as_bytes(user_map):
    kept = UserMap(f"{user_map()}:views")(PackSample("k/1", 0, {"jpg": b"\xff\xd8 a jpeg", "txt": b"caption"}))
    assert kept.sample.fields == {"jpg": b"\xff\xd8 a jpeg", "txt": b"caption"}
    assert all(type(value) is bytes for value in kept.sample.fields.values())


@pytest.mark.slow
def test_a_map_of_memoryviews_packs_from_a_folder(tmp_path, user_map):
    source, _ = make_source("folder", tmp_path)
    run = corgi("pack", source, tmp_path / "out", "--map", f"{user_map()}:views", "--workers", 1)
    assert run.returncode == 0, run.stderr
    assert open_manifest(tmp_path / "out").num_samples == 6 and corgi("verify", tmp_path / "out").returncode == 0


def test_max_sample_bytes_applies_to_what_the_map_returns(user_map):
    from corgi_io.packing.sample_rules import OutputRules

    rules = OutputRules.of(PackOptions(map_function=f"{user_map()}:add_reserved", max_sample_bytes=1000))
    sample = PackSample("k/1", 0, {"jpg": jpeg(8, 8, 0), "txt": b"x" * 1001})
    with pytest.raises(BadInput, match=r"field 'txt': 1,001 bytes, above the limit of 1,000 \(--max-sample-bytes\)"):
        rules.apply(sample, "jpg", "image", 64)


PEAK_OF_A_PACK = """
import resource, subprocess, sys
run = subprocess.run([sys.executable, "-c", sys.argv[1], "pack", *sys.argv[2:]], capture_output=True, text=True)
assert run.returncode == 0, run.stderr
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def peak_of_a_pack(*args) -> int:
    """Peak RSS (bytes) of `corgi pack *args` and the processes it waited for."""
    run = subprocess.run([sys.executable, "-c", PEAK_OF_A_PACK, CLI, *map(str, args)], capture_output=True, text=True,
                         check=True)
    return int(run.stdout)


@pytest.mark.slow
def test_a_block_of_map_output_is_written_as_it_comes_not_held(tmp_path, user_map):
    source, _ = make_source("folder", tmp_path, count=8)  # 8 samples of one block, each 30 MiB after the map
    options = ("--workers", 1, "--order", "keep")
    base = peak_of_a_pack(source, tmp_path / "plain", *options)
    peak = peak_of_a_pack(source, tmp_path / "mapped", *options, "--map", f"{user_map()}:big")
    assert open_manifest(tmp_path / "mapped").num_samples == 8 and len(open_manifest(tmp_path / "mapped").blocks) == 1
    assert peak - base < 4 * (30 << 20), f"{(peak - base) >> 20} MiB above a pack without the map"
    limited = corgi("pack", source, tmp_path / "limited", "--map", f"{user_map()}:big", "--max-sample-bytes", "20M")
    assert "field 'npy': 31,457,280 bytes, above the limit of 20,971,520 (--max-sample-bytes)" in limited.stderr


# --- every sample skipped -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["folder", "wds"])
def test_a_pack_that_skips_every_sample_says_so_and_writes_no_manifest(tmp_path, form):
    source, args = make_source(form, tmp_path)
    with pytest.raises(CorpusError, match=r"the corpus is empty \(every sample was skipped: 6 skipped, first: .*"
                                          r"below min_size 1,000,000,000"):
        pack(source, tmp_path / "out", PackOptions(min_size=10 ** 9), progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_sys_exit_in_other_user_code_is_a_failed_pack_not_a_silent_exit(tmp_path, write_user_module):
    write_user_module("corgi_exiting_size", "import sys\n\ndef size(path):\n    sys.exit(0)\n")
    source, _ = make_source("folder", tmp_path)
    with pytest.raises(PackError, match=r"the pack stopped: SystemExit: 0 \(no manifest written"):
        pack(source, tmp_path / "out", PackOptions(size_fn="corgi_exiting_size:size"), progress=False)


def test_the_map_help_says_the_primary_may_take_a_reserved_name_but_cls():
    from click.testing import CliRunner

    from corgi_io.cli import main

    shown = " ".join(CliRunner().invoke(main, ["pack", "--help"]).output.split())
    assert "a field other than the sample's primary with a reserved name" in shown
    assert "the primary may take any of them but cls" in shown


# --- reserved names read from SOURCE: one rule for the folder walk and the sources ----------------------------------

@pytest.mark.parametrize("form", ["folder", "wds"])
def test_a_source_field_with_a_reserved_name_is_left_out_and_its_sample_packed(tmp_path, form):
    import webdataset as wds

    if form == "folder":
        for i in range(4):
            write_image(tmp_path / "src" / "c" / f"{i}.jpg", 8 + i, 8)
            (tmp_path / "src" / "c" / f"{i}.source").write_bytes(b"from a crawl")
    else:
        (tmp_path / "src").mkdir()
        with wds.TarWriter(str(tmp_path / "src" / "part-000.tar")) as writer:
            for i in range(4):
                writer.write({"__key__": f"k{i}", "jpg": jpeg(8 + i, 8, i), "source": b"from a crawl"})
    pack(tmp_path / "src", tmp_path / "out", PackOptions(), workers=1, progress=False)
    manifest = open_manifest(tmp_path / "out")
    assert manifest.num_samples == 4 and manifest.fields == ["jpg"]
    skips = list(manifest.skip_records())
    left_out = f"{reserved_reason_of('source')}: left out, the sample packed without it"  # one text, both pipelines
    assert len(skips) == 4 and {entry["reason"] for entry in skips} == {left_out}, skips

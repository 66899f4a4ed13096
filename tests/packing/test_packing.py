"""The packing/ package piece by piece: public names, the pure plan, spooled strings, the pack-order table,
unique keys through hashes, executors, the one progress line."""
from __future__ import annotations

import importlib
import inspect
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import corgi_io
from corgi_io.errors import CorpusError, PackError
from corgi_io.formats import get_format
from corgi_io.manifest import open_manifest
from corgi_io.packing import keys as key_rules
from corgi_io.packing.corpus import discover
from corgi_io.packing.executors import LocalExecutor, report
from corgi_io.packing.pack_plan import PackOptions, make_plan
from corgi_io.packing.spool import SpooledColumn, SpooledStrings
from corgi_io.packing.table import Table, read_rows, write_table
from helpers.corpus_factory import write_listing, write_text


# --- public names ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_pack_is_a_function_and_no_submodule_hides_behind_it():
    assert inspect.isfunction(corgi_io.pack) and corgi_io.pack is corgi_io.packing.pack
    assert corgi_io.PackOptions is corgi_io.packing.PackOptions
    assert not (Path(corgi_io.__file__).parent / "pack.py").exists()
    for name in ("corpus", "pack_plan", "unit_task", "executors", "pipeline", "table", "output"):
        assert inspect.ismodule(importlib.import_module(f"corgi_io.packing.{name}"))
    proc = subprocess.run([sys.executable, "-c", "import corgi_io.packing.pipeline as m, inspect; "
                           "assert inspect.ismodule(m), m"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# --- the plan is pure ------------------------------------------------------------------------------

def plan_for(n: int, seed: int = 0, order: str = "shuffle"):
    rng = np.random.default_rng(seed)
    nbytes = rng.integers(1, 50_000, n)
    key_bytes = rng.integers(1, 120, n).astype(np.uint32)
    options = PackOptions(order=order, seed=seed, block_samples=7, block_bytes=60_000, shard_bytes=400_000)
    return make_plan(nbytes, key_bytes, options, get_format("wds"))


def test_plan_is_a_function_of_its_inputs_and_covers_every_sample_once():
    first, again = plan_for(2000), plan_for(2000)
    assert np.array_equal(first.order, again.order) and np.array_equal(first.block_starts, again.block_starts)
    assert np.array_equal(first.shard_starts, again.shard_starts)
    assert sorted(first.order.tolist()) == list(range(2000))
    covered = [p for shard in range(first.num_shards) for p in range(*first.positions(shard))]
    assert covered == list(range(2000))
    for shard in range(first.num_shards):
        blocks = first.shard_blocks(shard)
        assert all(0 < b - a <= 7 for a, b in zip(blocks, blocks[1:]))
    assert not np.array_equal(plan_for(2000, seed=1).order, first.order)
    assert plan_for(50, order="keep").order.tolist() == list(range(50))


def test_staging_drops_the_order_and_keeps_the_layout():
    plan = plan_for(2000)
    staged = plan.staged()
    assert staged.order is None and staged.num_samples == 2000 and staged.shard_blocks(1) == plan.shard_blocks(1)


# --- spooled values --------------------------------------------------------------------------------

def test_spooled_strings_round_trip_any_name_and_come_back_by_index(tmp_path):
    strings = SpooledStrings(tmp_path)
    names = ["a", "fête/ñ", "caf\udce9", "lone\ud800", "", "x" * 5000]
    strings.extend(names[:3])
    strings.extend(names[3:])
    strings.seal()
    assert len(strings) == 6 and list(tmp_path.iterdir()) == []  # unnamed files: nothing to clean up, ever
    taken = strings.take(np.array([5, 0, 3, 1, 2, 4]))
    assert [t.decode("utf-8", "surrogatepass") for t in taken] == [names[i] for i in (5, 0, 3, 1, 2, 4)]
    strings.close()


def test_spooled_column_reads_back_in_one_array(tmp_path):
    column = SpooledColumn(np.uint16, tmp_path)
    column.extend([1, 2])
    column.extend(np.arange(3, 1000))
    values = column.read()
    assert values.dtype == np.uint16 and values.tolist() == list(range(1, 1000))


# --- the pack-order table --------------------------------------------------------------------------

def test_table_rows_in_pack_order(tmp_path):
    names = {f"c{i % 3}/f{i:03d}.txt": i for i in range(40)}
    for rel, i in names.items():
        write_text(tmp_path / "src" / rel, 1 + i % 5, seed=i)
    corpus = discover(tmp_path / "src")
    order = np.random.default_rng(3).permutation(len(corpus))
    table = Table(str(tmp_path / "rows"), str(tmp_path / "strings"))
    write_table(table, corpus, order)
    files = list(corpus.files())
    rows = read_rows(table, 5, 17)
    assert rows.names == [files[i][1] for i in order[5:17]] and rows.keys == [files[i][2] for i in order[5:17]]
    assert rows.nbytes.tolist() == corpus.nbytes[order[5:17]].tolist()


# --- unique keys through hashes --------------------------------------------------------------------

def test_equal_keys_are_found_even_when_every_hash_collides():
    keys = ["a", "b", "a", "c", "b", "a"]
    groups = list(key_rules.equal_key_groups(np.zeros(len(keys), dtype=np.int64),
                                              lambda idx: [keys[i] for i in idx]))
    assert sorted(groups) == [[0, 2, 5], [1, 4]]
    distinct = list(key_rules.equal_key_groups(np.zeros(3, dtype=np.int64), lambda idx: [str(i) for i in idx]))
    assert distinct == []


def test_two_listing_rows_with_one_key_fail_naming_both(tmp_path, corgi):
    for name in ("a.txt", "b.txt", "c.txt"):
        write_text(tmp_path / name, 3)
    write_listing(tmp_path / "list.csv", [{"path": "a.txt"}, {"path": "b.txt", "key": "k"},
                                          {"path": "c.txt", "key": "k"}])
    with pytest.raises(CorpusError, match=r"two inputs have the same key 'k' \(b.txt, c.txt\)"):
        discover(tmp_path / "list.csv")
    result = corgi("pack", tmp_path / "list.csv", tmp_path / "out")
    assert result.exit_code == 1 and "same key" in result.stderr


def test_files_sharing_a_stem_are_one_sample_with_a_field_each(tmp_path):
    """The WebDataset rule (it replaced 'files sharing a stem keep their extension in the key'): photo.md and
    photo.txt are sample a/photo, primary md (the first text field); other stems keep their own samples."""
    for name in ("photo.JPG.txt", "photo.png.txt"):
        write_text(tmp_path / "src" / "a" / name, 3)
    write_text(tmp_path / "src" / "a" / "photo.txt", 3)
    write_text(tmp_path / "src" / "a" / "photo.md", 3)
    corpus = discover(tmp_path / "src")
    keys = {name: key for _, name, key in corpus.files()}
    assert keys == {"a/photo.JPG.txt": "a/photo%2EJPG", "a/photo.png.txt": "a/photo%2Epng",
                    "a/photo.md": "a/photo", "a/photo.txt": "a/photo"}
    assert len(corpus) == 3 and corpus.max_fields == 2 and corpus.extensions == ["md", "txt"]
    assert corpus.names_and_keys([0]) == (["a/photo.md\0a/photo.txt"], ["a/photo"])  # the walk sorts by stem
    assert corpus.key_bytes.tolist() == [len("a/photo"), len("a/photo%2EJPG"), len("a/photo%2Epng")]


# --- executors -------------------------------------------------------------------------------------

def square_and_report(task: int) -> int:
    report(1, task)
    if task < 0:
        raise PackError(f"task {task} failed")
    return task * task


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 3])
def test_local_executor_runs_every_task_and_relays_progress(workers):
    heard = []
    with LocalExecutor(workers) as executor:
        results = sorted(executor.run(square_and_report, range(20), lambda samples, nbytes: heard.append((samples, nbytes))))
    assert results == [i * i for i in range(20)]
    assert sum(s for s, _ in heard) == 20 and sum(b for _, b in heard) == sum(range(20))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_local_executor_raises_the_first_failure(workers):
    with LocalExecutor(workers) as executor, pytest.raises(PackError, match="task -1 failed"):
        list(executor.run(square_and_report, [1, 2, -1, 3], None))


# --- one progress line -----------------------------------------------------------------------------

def test_one_progress_line_covers_every_phase(tmp_path, monkeypatch):
    for i in range(30):
        write_text(tmp_path / "src" / f"c{i % 2}" / f"t{i}.txt", 4, seed=i)
    import corgi_io.packing.progress_bar as progress_module

    bars, stderr = [], io.StringIO()
    real_tqdm = progress_module.tqdm

    def counting_tqdm(*args, **kwargs):
        bars.append(real_tqdm(*args, **dict(kwargs, file=stderr)))
        return bars[-1]

    monkeypatch.setattr(progress_module, "tqdm", counting_tqdm)
    corgi_io.pack(tmp_path / "src", tmp_path / "out", PackOptions(shard_bytes=8 << 10), progress=True)
    shown = stderr.getvalue()
    assert len(bars) == 1
    for phase in ("walk", "plan", "write", "manifest"):
        assert f"{phase}:" in shown, shown
    assert "30.0file" in shown.replace(" ", "") and "MB/s" in shown


@pytest.mark.slow
def test_skipped_inputs_at_write_time_are_warned_and_recorded(tmp_path, corgi):
    write_text(tmp_path / "src" / "a" / "ok.txt", 3)
    (tmp_path / "src" / "a" / "latin1.txt").write_bytes("café".encode("latin-1"))
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert "warning: skipped a/latin1.txt: not UTF-8 text" in result.stderr
    head = json.loads((tmp_path / "out" / "manifest.json").read_bytes())
    assert head["skipped"]["count"] == 1  # the head summarises; columns/skipped.jsonl holds the records
    assert list(open_manifest(tmp_path / "out").skip_records()) == [{"path": "a/latin1.txt", "reason": "not UTF-8 text (byte 3)"}]
    assert open_manifest(tmp_path / "out").keys() == ["a/ok"]

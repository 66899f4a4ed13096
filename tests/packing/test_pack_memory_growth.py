"""What keeps the peak RSS of the `corgi pack` process tree from growing with the corpus (issue 30): the pool's
workers forked before the walk, freed columns handed back to the system, a narrow corpus and pack order, a write
task's record columns spilled to disk, and the driver's manifest columns filled in place (no repeated-key pass for a
folder, whose walk refused them already).

bench/pack_memory.py --tree measures the figure itself (GNU time %M at 5x10^4 and 2.5x10^5 files); these tests
pin each mechanism, and the bench's --tree lines.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corgi_io.formats import get_format
from corgi_io.packing import records
from corgi_io.packing.corpus import discover
from corgi_io.packing.manifest_columns import PackColumns
from corgi_io.packing.pack_plan import PackOptions, make_plan, pack_order
from corgi_io.packing.pipeline import pack
from corgi_io.processes import worker_pool
from helpers.corpus_factory import write_text
from helpers.source_shards import write_tars

BENCH = Path(__file__).parents[2] / "bench" / "pack_memory.py"
MIB = 1 << 20
RETURNED = """
import sys
import numpy as np
from corgi_io.packing.corpus import discover

def anonymous():
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith("RssAnon:"))

discover(sys.argv[1], spool_dir=sys.argv[2])
before = anonymous()
for size in (8 << 20, 4 << 20):  # glibc's default would serve the second from the heap, and keep it once freed
    column = np.ones(size, dtype=np.uint8)
    del column
print(anonymous() - before)
"""


def anonymous_rss() -> int:
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith("RssAnon:"))


@pytest.mark.parametrize("count", [1, 7, 5000])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_pack_order_is_the_seeded_permutation_in_int32(count, seed):
    order = pack_order(count, PackOptions(seed=seed))
    assert order.dtype == np.int32
    assert order.tolist() == np.random.default_rng(seed).permutation(count).tolist()  # the packs' bytes depend on it
    assert pack_order(count, PackOptions(order="keep")).tolist() == list(range(count))


def test_the_corpus_narrows_byte_counts_and_field_masks(tmp_path):
    (tmp_path / "src" / "cat").mkdir(parents=True)
    for stem, size in (("a", 10), ("b", 300)):
        (tmp_path / "src" / "cat" / f"{stem}.txt").write_bytes(b"x" * size)
    (tmp_path / "src" / "cat" / "a.json").write_bytes(b"1")
    corpus = discover(tmp_path / "src", spool_dir=tmp_path)
    assert corpus.nbytes.dtype == np.uint16 and corpus.nbytes.tolist() == [11, 300]
    assert corpus.fields.dtype == np.uint8 and corpus.fields.tolist() == [3, 2]
    corpus.close()


def test_the_plan_widens_narrow_byte_counts_before_estimating():
    nbytes = np.array([65_000, 65_535, 10, 64_000] * 50, dtype=np.uint16)  # padded to 512 B they overflow uint16
    key_bytes = np.full(len(nbytes), 9, dtype=np.uint32)
    options, fmt = PackOptions(block_bytes=200_000, shard_bytes=1_000_000), get_format("wds")
    narrow, wide = (make_plan(sizes, key_bytes, options, fmt) for sizes in (nbytes, nbytes.astype(np.int64)))
    assert np.array_equal(narrow.block_starts, wide.block_starts) and len(narrow.block_starts) > 10
    assert np.array_equal(narrow.shard_starts, wide.shard_starts)


def _worker_anonymous_rss() -> int:
    return anonymous_rss()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="forked workers and /proc are Linux's")
def test_a_pool_forks_its_workers_when_it_opens_so_they_inherit_nothing_allocated_later():
    pool = worker_pool(1)
    try:
        held = np.ones(64 * MIB, dtype=np.uint8)  # what the driver's walk allocates once the pool is open
        worker = pool.submit(_worker_anonymous_rss).result()
        assert worker < anonymous_rss() - 48 * MIB, (worker, anonymous_rss())  # forked at the submit: it holds `held`
        del held
    finally:
        pool.shutdown()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc")
def test_after_the_walk_a_freed_column_goes_back_to_the_system(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_bytes(b"a")
    result = subprocess.run([sys.executable, "-c", RETURNED, str(tmp_path / "src"), str(tmp_path)],
                            capture_output=True, text=True, check=True)
    assert int(result.stdout) < 1 * MIB, f"{int(result.stdout) / MIB:.1f} MiB of freed columns stayed resident"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="GNU time measures the tree")
def test_the_tree_bench_reports_gnu_time_of_the_whole_pack_and_its_growth(tmp_path):
    result = subprocess.run([sys.executable, BENCH, "--tree", "--sizes", "300", "1500", "--workdir", tmp_path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("# corgi pack --workers 2, 1 KB text files"), lines
    peaks = r"%M +[\d.]+ MiB \((driver|a worker)\)  driver +[\d.]+ MiB  worker +[\d.]+ MiB  pack +[\d.]+ s"
    assert re.fullmatch(rf"pack_tree +300 files  {peaks}  \(baseline\)", lines[1]), lines[1]
    assert re.fullmatch(rf"pack_tree +1,500 files  {peaks}  growth vs 300 files: %M +-?[\d.]+ B/file \(driver "
                        r"+-?[\d.]+, worker +-?[\d.]+\); target <= 64 B/file: (met|NOT met)", lines[2]), lines[2]
    worker = float(re.search(r"worker +([\d.]+) MiB", lines[2]).group(1))
    assert worker > 0  # the pool's workers were seen
    assert not list(tmp_path.glob("*.complete-*"))  # the corpora and their markers are gone without --keep


def _unit_columns(record: Path, count: int) -> records.UnitColumns:
    columns = records.UnitColumns(record)
    for i in range(count):
        columns.add(i // 10, 1000 * (i // 10), (i, 1, i + 1, 2, 3, i * 7, 1, 0, i % 4, 1, f"key-{i}",
                                                ((0, 512, 512, 2, i),)))
        if i % 4 == 3:
            columns.end_block()
    return columns


def test_a_write_task_holds_at_most_spill_rows_samples_and_its_record_reads_back_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "SPILL_ROWS", 8)
    record = tmp_path / "unit-000000.rec"
    columns = _unit_columns(record, 29)
    assert len(columns.columns["offset"]) < 8 and columns.count == 29  # the rest is in the spill file
    assert [list(part) for part in columns.shard_records(2)] == [[2000 + i for i in range(20, 29)], [1] * 9]
    done = records.UnitDone(0, ("s",), (1,), columns.shard_samples(), 29, 0, (), (), (), 29)
    records.save_record(record, done, columns)
    columns.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == [record.name]  # the spill file is gone
    assert records.load_column(record, "offset").tolist() == [1000 * (i // 10) + i for i in range(29)]
    assert records.load_column(record, "block").tolist() == [i // 4 for i in range(29)]
    assert records.load_column(record, "field_offset").tolist() == [1000 * (i // 10) + i + 512 for i in range(29)]
    assert records.load_column(record, "field_crc").tolist() == list(range(29))
    blob, offsets = records.load_column(record, "key_blob"), records.load_column(record, "key_offsets")
    assert [blob[a:b].tobytes().decode() for a, b in zip(offsets[:-1], offsets[1:])] == [f"key-{i}" for i in range(29)]
    assert records.load_done(record, tmp_path) is None  # its shard "s" is not there: not a finished unit


def test_the_driver_reads_a_record_column_into_its_joined_column_and_refuses_one_too_long(tmp_path):
    with open(tmp_path / "old.rec", "wb") as f:
        np.savez(f, key_blob=np.frombuffer(b"abcdef", np.uint8))  # as np.savez wrote records
    out = np.zeros(8, np.uint8)
    assert records.read_column_into(tmp_path / "old.rec", "key_blob", out[1:]) == 6 and out.tobytes() == b"\0abcdef\0"
    with pytest.raises(OSError, match="its key_blob column is not at most 5 uint8") as refused:
        records.read_column_into(tmp_path / "old.rec", "key_blob", out[:5])
    assert refused.value.filename == str(tmp_path / "old.rec")


def _folder(root: Path, count: int) -> Path:
    for i in range(count):
        write_text(root / f"c{i % 3}" / f"f{i:03d}.txt", 3, seed=i)
    return root


def test_the_repeated_key_pass_runs_for_shards_and_tables_only(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(PackColumns, "repeated_key", lambda self: calls.append(1))
    pack(_folder(tmp_path / "src", 12), tmp_path / "out")
    assert calls == []  # a folder's walk refused repeated keys already: no second pass over every key
    write_tars(tmp_path / "tars", tars=2, per_tar=3)
    pack(tmp_path / "tars", tmp_path / "out2")
    assert calls == [1]


def test_a_pack_with_spilled_record_columns_is_byte_identical(tmp_path, monkeypatch):
    source = _folder(tmp_path / "src", 40)
    pack(source, tmp_path / "held", PackOptions(block_samples=3, shard_bytes=8 << 10))
    monkeypatch.setattr(records, "SPILL_ROWS", 2)
    pack(source, tmp_path / "spilled", PackOptions(block_samples=3, shard_bytes=8 << 10))
    held, spilled = pack_files(tmp_path / "held"), pack_files(tmp_path / "spilled")
    assert len(held) > 5 and held == spilled


def pack_files(root) -> dict:
    """{relative path: bytes} of a pack's files, the manifest's `created` time left out: two packs may straddle a
    second (CI failed so at f248a83's successor)."""
    import json

    files = {path.relative_to(root): path.read_bytes() for path in root.rglob("*")
             if path.is_file() and path.name != "head.json"}
    head = json.loads(files.pop(Path("manifest.json")))
    head.pop("created")
    return {**files, Path("manifest.json"): json.dumps(head, sort_keys=True).encode()}

"""The pack driver in bounded memory: compact columns, no Python object per file, a streaming walk, a linear label index.

Memory is measured with tracemalloc (live Python and numpy allocations, deterministic), not RSS, which
also counts allocator slack; bench/pack_memory.py measures RSS at 5x10^5 files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from corgi_io.packing import corpus as corpus_module
from corgi_io.packing.corpus import discover

DRIVER_BYTES_PER_FILE = 64  # issue 9: the driver holds at most 64 B per file
DRIVER = """
import json, sys, tracemalloc
from corgi_io import PackOptions, pack
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
pack(sys.argv[1], sys.argv[2], PackOptions(shard_bytes=4 << 20), workers=2, progress=False)
print(json.dumps(tracemalloc.get_traced_memory()[1] - base))
"""


def tiny_files(root: Path, count: int, classes: int = 50) -> Path:
    """`count` 64-byte text files in `classes` folders, ImageNet-like names."""
    for label in range(classes):
        (root / f"n{label:08d}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        fd = os.open(root / f"n{i % classes:08d}" / f"n{i % classes:08d}_{i:06d}.txt", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"tiny corgi text " * 4)
        os.close(fd)
    return root


def traced_corpus_bytes(root: Path, tmp_path: Path) -> tuple:
    """(live bytes the Corpus of `root` holds, number of files), measured with tracemalloc."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        corpus = discover(root, spool_dir=tmp_path)
        return tracemalloc.get_traced_memory()[0] - before, len(corpus)
    finally:
        tracemalloc.stop()


def test_the_walk_keeps_35_bytes_per_sample_and_no_python_object(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "CHUNK", 500)  # many chunks
    small, n_small = traced_corpus_bytes(tiny_files(tmp_path / "small", 1500), tmp_path)
    large, n_large = traced_corpus_bytes(tiny_files(tmp_path / "large", 6000), tmp_path)
    per_file = (large - small) / (n_large - n_small)
    assert per_file <= 38, f"the corpus holds {per_file:.1f} B per file"  # 35 B of columns (8 of them the field
                                                                            # mask), names on disk


@pytest.mark.slow
def test_driver_memory_per_file_is_bounded(tmp_path):
    """Live allocations of the driver (walk, plan, table, manifest; two worker processes write the shards)."""
    peaks = {}
    for count in (10_000, 30_000):
        source = tiny_files(tmp_path / f"corpus-{count}", count, classes=300)
        proc = subprocess.run([sys.executable, "-c", DRIVER, str(source), str(tmp_path / f"out-{count}")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        peaks[count] = json.loads(proc.stdout)
    per_file = (peaks[30_000] - peaks[10_000]) / 20_000
    print(f"driver peak of live allocations: {peaks}, {per_file:.1f} B per file")
    assert per_file <= DRIVER_BYTES_PER_FILE


def test_a_listing_is_walked_as_it_is_read(tmp_path, monkeypatch):
    """A listing arriving through a FIFO: the first chunk is counted before the listing is complete."""
    monkeypatch.setattr(corpus_module, "CHUNK", 10)
    for i in range(40):
        (tmp_path / f"f{i}.txt").write_bytes(b"a b")
    listing = tmp_path / "list.jsonl"
    os.mkfifo(listing)
    counted = threading.Event()
    seen_before_the_end = []

    def write_listing():
        with open(listing, "w") as fifo:
            for i in range(20):
                fifo.write(json.dumps({"path": f"f{i}.txt"}) + "\n")
            fifo.flush()
            seen_before_the_end.append(counted.wait(timeout=10))
            for i in range(20, 40):
                fifo.write(json.dumps({"path": f"f{i}.txt"}) + "\n")

    writer = threading.Thread(target=write_listing)
    writer.start()
    chunks = []
    corpus = discover(listing, spool_dir=tmp_path, progress=lambda files: (chunks.append(files), counted.set()))
    writer.join()
    assert seen_before_the_end == [True], "the walk waited for the whole listing"
    assert len(corpus) == 40 and sum(chunks) == 40 and max(chunks) <= 10


def test_a_folder_walk_is_counted_chunk_by_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "CHUNK", 7)
    tiny_files(tmp_path / "src", 50, classes=5)
    chunks = []
    corpus = discover(tmp_path / "src", spool_dir=tmp_path, progress=chunks.append)
    assert len(corpus) == 50 and sum(chunks) == 50 and max(chunks) == 7 and len(chunks) >= 8


def test_a_label_index_of_21841_classes_costs_a_dict_lookup_per_file(tmp_path):
    """ImageNet-21k: the old walk rebuilt set(label_index) per file (0.77 ms) and deleted filtered files
    one at a time from 8 lists; 3,000 files took seconds."""
    tiny_files(tmp_path / "src", 3000, classes=300)
    index = tuple(f"n{i:08d}" for i in range(0, 2 * 21841, 2))  # every other class of the corpus is in it
    started = time.perf_counter()
    corpus = discover(tmp_path / "src", label_index=index, spool_dir=tmp_path)
    elapsed = time.perf_counter() - started
    assert len(corpus) == 1500 and len(corpus.skipped) == 1500
    assert corpus.labels == list(index)
    for (_, name, _), label in zip(corpus.files(), corpus.label.tolist()):
        assert index[label] == name.split("/")[0]
    assert elapsed < 0.5, f"{elapsed:.2f} s for 3,000 files"

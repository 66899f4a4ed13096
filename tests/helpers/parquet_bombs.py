"""Parquet compression bombs for tests: one cell of zeros, a few KB on disk, and a footer that understates it."""
from __future__ import annotations

import struct
import subprocess
import sys

from helpers.processes import CLI

BOMB = """
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq
n = int(sys.argv[2])  # one cell of n zero bytes, zstd: a few KB on disk
offsets, zeros = pa.py_buffer(np.array([0, n], np.int32)), pa.py_buffer(np.zeros(n, np.uint8))
cell = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, zeros])
pq.write_table(pa.table({"txt": cell}), sys.argv[1], compression="zstd", use_dictionary=False)
"""
_PEAK_OF_A_PACK = """
import resource, subprocess, sys
run = subprocess.run([sys.executable, "-c", sys.argv[1], "pack", *sys.argv[2:]], capture_output=True, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, run.returncode, run.stderr.replace("\\n", " | "))
"""
_GROWTH_OF_A_READ = """
import ast, resource, sys
import pyarrow.parquet
from corgi_io.packing.sources import parquet
from corgi_io.packing.sources.unit_list import Unit, read_unit
path, rows, parquet.BATCH_BYTES, limits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), ast.literal_eval(sys.argv[4])
skips, before = [], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
count = sum(1 for _ in read_unit(Unit("parquet", path, 0, 0, rows), columns={"txt": "txt"}, on_skip=skips.append,
                                 **limits))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024, count, " | ".join(skips))
"""


def bomb(path, cell_bytes: int, claimed: int | None = None) -> str:
    """Write a Parquet file of one zstd cell of `cell_bytes` zeros at `path` (in a subprocess: its memory is not
    the test's); with `claimed`, its footer says the column chunk (and row group) is that many bytes uncompressed."""
    subprocess.run([sys.executable, "-c", BOMB, str(path), str(cell_bytes)], check=True)
    if claimed is not None:
        understate(path, claimed)
    return str(path)


def understate(path, claimed: int) -> None:
    """Make the footer of the one-column, one-row-group Parquet file at `path` say its column chunk (and row group)
    is `claimed` bytes uncompressed."""
    import pyarrow.parquet as pq

    real = pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size
    assert _understate(path, real, claimed) == 2  # the column chunk's size and the row group's
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size == claimed


def read_growth(path, rows: int, batch_bytes: int, **limits) -> tuple:
    """(the bytes the peak RSS grew by, the samples read, the skip messages) of reading row group 0 (`rows` rows)
    of the Parquet file at `path`, column txt, with parquet.BATCH_BYTES set to `batch_bytes`, in a subprocess."""
    run = subprocess.run([sys.executable, "-c", _GROWTH_OF_A_READ, str(path), str(rows), str(batch_bytes),
                          repr(limits)], capture_output=True, text=True, check=True)
    growth, count, skips = run.stdout.split(" ", 2)
    return int(growth), int(count), skips.strip()


def pack_peak(source, out) -> tuple:
    """(the peak RSS in bytes, stderr) of `corgi pack` of folder `source` into `out`: column txt, at most 10 MiB a
    sample, one worker."""
    args = [str(source), str(out), "--columns", "txt=txt", "--max-sample-bytes", "10MiB", "--workers", "1"]
    run = subprocess.run([sys.executable, "-c", _PEAK_OF_A_PACK, CLI, *args], capture_output=True, text=True,
                         check=True)
    peak, _, stderr = run.stdout.split(" ", 2)
    return int(peak), stderr


def _understate(path, real: int, claimed: int) -> int:
    """Rewrite the footer of the Parquet file at `path` so that every i64 field of value `real` that follows its
    field before (a column chunk's total_uncompressed_size, a row group's total_byte_size) reads `claimed`, in as
    many bytes (an overlong varint, which Thrift readers take); the number of fields rewritten."""
    data = bytearray(open(path, "rb").read())
    (length,) = struct.unpack("<I", data[-8:-4])
    footer = bytes(data[-8 - length:-8])
    old = b"\x16" + _varint(real * 2)  # field id delta 1, compact type i64; zigzag of a positive value
    new = b"\x16" + _varint(claimed * 2, len(old) - 1)
    data[-8 - length:-8] = footer.replace(old, new)
    open(path, "wb").write(data)
    return footer.count(old)


def _varint(value: int, width: int = 1) -> bytes:
    """`value` as a ULEB128 varint of at least `width` bytes."""
    out = bytearray()
    while value >= 0x80 or len(out) < width - 1:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))

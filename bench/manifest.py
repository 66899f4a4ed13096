"""Opening a manifest at 10^6, 10^7 and 10^8 samples: time and resident memory (issue 8, section 4).

Builds synthetic, fully consistent version-2 manifests (no shard files: opening a pack never
touches them) with blocks of 1024 samples, 5 blocks per shard and 14-byte keys, one column at
a time with `save_column` and `save_head`.  Then, each measurement in a fresh process:

  open    `open_manifest`: the first open's seconds and VmRSS right after it, and the best of
          --repeat opens (warm page cache).  Targets at 10^8: RSS <= 64 MB, open <= 0.5 s.
  eager   the baseline: `open_manifest` then `validate_rows()` over every row, which is what
          opening cost before rows were validated lazily.
  rank    rank 0 of W=64 (count balance, `assign_ranks`) validates and reads its pieces' rows
          as the loader does; the growth of its RSS (anonymous and file-backed) against its
          share of the columns plus the block table.  Run with the columns dropped from the
          page cache first (a node that did not write the pack), then warm (every page cached
          by the eager run, in the large folios that read-ahead builds).

    python bench/manifest.py [--samples 1000000 10000000 100000000] [--repeat 5] [--dir /tmp]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import drop_page_cache  # noqa: E402
from _timing import best_of  # noqa: E402

from corgi_io.manifest import COLUMNS_DIR, column_schema, open_manifest, save_column, save_head  # noqa: E402

BLOCK, SHARD_BLOCKS, WORLD = 1024, 5, 64
SHARD_SAMPLES = BLOCK * SHARD_BLOCKS
PATTERN = 512 * (2 + (np.arange(16) * 5) % 16)          # record lengths, repeating every 16 samples of a shard
PREFIX = np.concatenate([[0], np.cumsum(PATTERN)[:-1]])
KEY_PREFIX, KEY_DIGITS = b"img/", 10                   # keys "img/0000000042": 14 bytes
CHUNK = 1 << 22                                        # rows generated at once
MB = 1 << 20
WHY = {"cold": "a map holds whole 4 KiB pages: each block used spans 1-3 pages of each of 12 files",
       "warm": "the kernel also maps the cached pages around each fault (fault-around), other ranks' rows"}


# --- a synthetic pack, column by column -----------------------------------------------------

def sample_column(name: str, i: np.ndarray) -> np.ndarray:
    """Column `name` (without "sample_") of samples `i`: contiguous records from byte 0 of each shard."""
    j = i % SHARD_SAMPLES
    offset = lambda: (j // 16) * int(PATTERN.sum()) + PREFIX[j % 16]  # noqa: E731
    return {"label": lambda: i % 1000, "kind": lambda: np.zeros(len(i)), "ext": lambda: np.zeros(len(i)),
            "bytes": lambda: PATTERN[j % 16] - 600, "size": lambda: 1000 + (i * 2654435761) % 100_000,
            "shard": lambda: i // SHARD_SAMPLES, "offset": offset, "length": lambda: PATTERN[j % 16],
            "data_offset": lambda: offset() + 512, "checksum": lambda: (i * 2654435761) & 0xFFFFFFFF}[name]()


def key_bytes(i: np.ndarray) -> np.ndarray:
    digits = (i[:, None] // 10 ** np.arange(KEY_DIGITS - 1, -1, -1)) % 10 + ord("0")
    return np.hstack([np.tile(np.frombuffer(KEY_PREFIX, np.uint8), (len(i), 1)), digits.astype(np.uint8)])


def filled(n: int, dtype, make, width: int = 1) -> np.ndarray:
    out = np.empty((n, width) if width > 1 else n, dtype=dtype)
    for a in range(0, n, CHUNK):
        out[a:a + CHUNK] = make(np.arange(a, min(a + CHUNK, n), dtype=np.int64))
    return out.reshape(-1)


def build(root: Path, n: int) -> None:
    """A consistent pack of `n` samples at `root` (columns and head, no shards)."""
    schema = column_schema()
    for name in schema:
        if name.startswith("sample_"):
            save_column(root, name, filled(n, schema[name], lambda i: sample_column(name[7:], i)))
    save_column(root, "key_blob", filled(n, np.uint8, key_bytes, len(KEY_PREFIX) + KEY_DIGITS))
    save_column(root, "key_offsets", np.arange(n + 1, dtype=np.int64) * (len(KEY_PREFIX) + KEY_DIGITS))
    first = np.arange(0, n, BLOCK, dtype=np.int64)
    count = np.minimum(BLOCK, n - first)
    last = first + count - 1
    sizes = filled(n, np.int64, lambda i: sample_column("size", i))
    end = sample_column("offset", last) + sample_column("length", last)
    blocks = {"shard": first // SHARD_SAMPLES, "offset": sample_column("offset", first), "first": first,
              "count": count, "length": end - sample_column("offset", first), "size_sum": np.add.reduceat(sizes, first)}
    for name, array in blocks.items():
        save_column(root, f"block_{name}", array)
    shard_first = np.arange(0, n, SHARD_SAMPLES)
    shard_last = np.minimum(shard_first + SHARD_SAMPLES, n) - 1
    shard_end = sample_column("offset", shard_last) + sample_column("length", shard_last)
    shards = [{"path": f"shard-{k:06d}.tar", "bytes": int(shard_end[k]) + 1024, "first_sample": int(shard_first[k]),
               "samples": int(shard_last[k] - shard_first[k] + 1)} for k in range(len(shard_first))]
    head = {"format": "wds", "options": {}, "labels": [f"class_{c}" for c in range(1000)], "extensions": ["jpg"],
            "checksum": "crc32c", "shards": shards, "skipped": [], "created": "synthetic"}
    save_head(root, head, {"samples": n, "blocks": len(first), "key_bytes": n * (len(KEY_PREFIX) + KEY_DIGITS)})


# --- measurements, each in a fresh process --------------------------------------------------

def memory() -> dict:
    """This process's VmRSS, RssAnon and RssFile in bytes."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                fields[name] = int(value.split()[0]) * 1024
    return fields


def measure_open(root: str, repeat: int) -> dict:
    before = memory()
    start = time.perf_counter()
    m = open_manifest(root)
    first = time.perf_counter() - start
    after = memory()
    block_table = sum(column.nbytes for column in m.blocks.arrays.values())
    return {"first": first, "best": best_of(lambda: open_manifest(root), repeat), "before": before, "after": after,
            "block_table": block_table, "blocks": len(m.blocks)}


def measure_eager(root: str) -> dict:
    start = time.perf_counter()
    m = open_manifest(root)
    m.validate_rows()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "after": memory(), "samples": m.num_samples}  # measured while `m` is alive


def read_piece_rows(m, start: int, stop: int) -> list:
    """The rows PieceReader reads for one piece: its byte range, the running checksum, the payload split."""
    s = m.samples
    byte_range = (int(s.shard[start]), int(s.offset[start]), int(s.offset[stop - 1] + s.length[stop - 1]))
    split = [(s.data_offset[start:stop] - s.offset[start]).tolist(), s.bytes[start:stop].tolist(),
             s.label[start:stop].tolist(), s.size[start:stop].tolist(), m.keys(start, stop)]
    return [byte_range, int(s.checksum[stop - 1]), split]


def measure_rank(root: str, world: int) -> dict:
    """Rank 0's pieces of epoch 0, validated and read as PieceReader reads them; RSS before and after."""
    from corgi_io.schedule import assign_ranks

    m = open_manifest(root)
    pieces = assign_ranks(m.blocks.first, m.blocks.count, world, seed=0, epoch=0)[0].tolist()
    other = next(b for b in range(len(m.blocks)) if b not in {block for block, _, _ in pieces})
    start, stop = int(m.blocks.first[other]), int(m.blocks.first[other] + m.blocks.count[other])
    m.validate_rows(start, stop)  # a block of another rank: the code paths' own pages are faulted in before
    read_piece_rows(m, start, stop)
    before, rows = memory(), 0
    for _, start, stop in pieces:
        m.validate_rows(start, stop)  # what the loader calls before it uses a piece's rows
        read_piece_rows(m, start, stop)
        rows += stop - start
    row_bytes = sum(np.dtype(dtype).itemsize for name, dtype in column_schema().items() if name.startswith("sample_"))
    row_bytes += 8 + len(KEY_PREFIX) + KEY_DIGITS  # key offset and key bytes
    return {"before": before, "after": memory(), "rows": rows, "share": rows * row_bytes, "pieces": len(pieces),
            "block_table": sum(column.nbytes for column in m.blocks.arrays.values())}


def child(kind: str, root: Path, repeat: int) -> dict:
    import subprocess

    command = [sys.executable, __file__, "--child", kind, str(root), "--repeat", str(repeat)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


# --- the report ---------------------------------------------------------------------------------

def report(n: int, opened: dict, eager: dict, cold: dict, warm: dict) -> list:
    rss, base = opened["after"]["VmRSS"] / MB, opened["before"]["VmRSS"] / MB
    eager_rss = eager["after"]["VmRSS"] / MB
    lines = [f"manifest open {n:,} samples ({opened['blocks']:,} blocks): {opened['best']:.4f} s best of warm opens "
             f"(first open {opened['first']:.4f} s), RSS right after open {rss:.0f} MB ({rss - base:+.1f} MB over the "
             f"{base:.0f} MB interpreter); baseline open + every row validated (what open cost before) "
             f"{eager['seconds']:.3f} s, RSS {eager_rss:.0f} MB: ratio {eager['seconds'] / opened['best']:.0f}x faster, "
             f"{eager_rss / rss:.1f}x less RSS; targets open <= 0.5 s {'met' if opened['best'] <= 0.5 else 'MISSED'}, "
             f"RSS <= 64 MB {'met' if rss <= 64 else 'MISSED'}"]
    for cache, rank in (("cold", cold), ("warm", warm)):
        grew = {k: (rank["after"][k] - rank["before"][k]) / MB for k in ("VmRSS", "RssAnon", "RssFile")}
        bound = (rank["share"] + rank["block_table"]) / MB
        lines.append(f"manifest rank {n:,} samples W={WORLD} rank 0 ({cache} page cache): {rank['rows']:,} rows in "
                     f"{rank['pieces']:,} pieces; RSS grew {grew['VmRSS']:.1f} MB (anonymous {grew['RssAnon']:.1f}, "
                     f"file-backed {grew['RssFile']:.1f}) against its share {rank['share'] / MB:.1f} MB + block table "
                     f"{rank['block_table'] / MB:.1f} MB = {bound:.1f} MB: ratio {grew['VmRSS'] / bound:.2f}, "
                     f"{'within' if grew['VmRSS'] <= bound else 'OVER'} ({WHY[cache]}); all columns: "
                     f"{rank['share'] * WORLD / MB:.0f} MB")
    return lines


def main():
    import argparse  # the parent's imports: a measuring child imports no more than a process that opens a pack
    import shutil
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, nargs="+", default=[1_000_000, 10_000_000, 100_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the synthetic packs are built (default: the temp dir)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, root = args.child
        measure = {"open": lambda: measure_open(root, args.repeat), "eager": lambda: measure_eager(root),
                   "rank": lambda: measure_rank(root, WORLD)}[kind]
        print(json.dumps(measure()))
        return
    for n in args.samples:
        root = Path(tempfile.mkdtemp(prefix="corgi-manifest-bench-", dir=args.dir))
        try:
            start = time.perf_counter()
            build(root, n)
            size = sum(p.stat().st_size for p in (root / COLUMNS_DIR).iterdir())
            print(f"# built {n:,} samples in {time.perf_counter() - start:.0f} s: columns {size / MB:.0f} MB", flush=True)
            drop_page_cache((root / COLUMNS_DIR).iterdir())
            cold = child("rank", root, args.repeat)
            opened = child("open", root, args.repeat)
            eager = child("eager", root, args.repeat)
            warm = child("rank", root, args.repeat)
            print("\n".join(report(n, opened, eager, cold, warm)), flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

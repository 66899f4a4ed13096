"""Manifest load time for a 1,000,000-sample pack (target: under 0.5 s, validation included).

Builds a synthetic but fully consistent manifest (100 shards of 10,000 contiguous records,
blocks of 64) with `save_manifest`, then times `open_manifest` from a warm page cache.
The baseline is json.loads of the same per-sample columns as plain JSON lists, which is
what a naive all-JSON manifest would cost.

    python bench/manifest.py [--samples 1000000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_of  # noqa: E402

from corgi_io.manifest import open_manifest, save_manifest  # noqa: E402


def build(root: Path, n: int, per_shard: int = 10_000, block: int = 64) -> None:
    rng = np.random.default_rng(0)
    nbytes = rng.lognormal(np.log(100_000), 0.8, n).astype(np.int64) + 1
    length = 512 + -(-nbytes // 512) * 512 + 1024
    shard = np.arange(n) // per_shard
    first_of_shard = np.arange(0, n, per_shard)
    offset = np.cumsum(length) - length
    offset -= np.repeat(offset[first_of_shard], np.diff(np.append(first_of_shard, n)))
    sizes = rng.lognormal(np.log(150_000), 1.0, n).astype(np.int64)
    block_first = np.concatenate([np.arange(f, min(f + per_shard, n), block) for f in first_of_shard])
    block_count = np.diff(np.append(block_first, n))
    last = block_first + block_count - 1
    samples = dict(label=(np.arange(n) % 1000).astype(np.int32), kind=np.zeros(n, np.uint8), bytes=nbytes,
                   size=sizes, shard=shard, offset=offset, length=length, data_offset=offset + 512,
                   crc32=rng.integers(0, 2 ** 32, n, dtype=np.uint32))
    blocks = dict(shard=shard[block_first], offset=offset[block_first],
                  length=offset[last] + length[last] - offset[block_first], first=block_first, count=block_count,
                  size_sum=np.add.reduceat(sizes, block_first))
    shards = [{"path": f"shard-{i:06d}.tar", "bytes": int(offset[f + min(per_shard, n - f) - 1]
                                                         + length[f + min(per_shard, n - f) - 1] + 1024),
               "first_sample": int(f), "samples": int(min(per_shard, n - f))} for i, f in enumerate(first_of_shard)]
    head = {"format": "wds", "options": {}, "labels": [f"class_{i}" for i in range(1000)], "shards": shards,
            "skipped": []}
    keys = [f"class_{i % 1000}/img_{i:08d}" for i in range(n)]
    save_manifest(root, head, samples, blocks, keys)
    (root / "naive.json").write_text(json.dumps({k: v.tolist() for k, v in samples.items()} | {"keys": keys}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, args.samples)
        ours = best_of(lambda: open_manifest(root), args.repeat)
        naive = best_of(lambda: json.loads((root / "naive.json").read_bytes()), args.repeat)
        size_mb = (root / "manifest.npz").stat().st_size / 1e6
    print(f"manifest open_manifest {args.samples:,} samples {ours:.3f} s ({size_mb:.0f} MB columns, validated) "
          f"ratio {naive / ours:.1f}x vs json.loads of the same columns ({naive:.3f} s); target < 0.5 s: "
          f"{'met' if ours < 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()

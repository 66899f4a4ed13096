"""The cache of remote pieces: remote bytes per epoch with Belady eviction against LRU, and samples/s.

The pack (--n long-tailed JPEGs, blocks of --block-samples) is served by nginx on 127.0.0.1; each
loader reads --epochs epochs of it, bytes only (decode=None), shuffle corgipile, one process:

    python bench/remote_cache.py [--n 6000] [--block-samples 64] [--epochs 4] [--limit 0.5] [--rounds 3]
    python bench/remote_cache.py --first-epoch [--n 6000] [--rounds 5]

* no cache (the baseline of samples/s);
* cache=Cache(folder, limit) with limit = --limit x the pack's shard bytes, policy "belady";
* the same with Cache(..., policy="lru") (the baseline of remote bytes).

Remote bytes are counted at the storage layer (`Storage.bytes_read`, every ranged read the loader
made, the prefetch of the next epoch's first pieces included, which counts in the epoch that ends), per epoch.
Each cached loader starts on an empty folder; --rounds rounds run the three loaders in turn
(interleaved), and every figure is the median over the rounds.  One line per cached loader and epoch
after the first (remote bytes, their ratio to the pack, Belady's ratio to LRU of the same epoch), then
one line per loader with samples/s over the epochs after the first and its ratio to the uncached
loader.  Goals (issue 19): Belady's remote bytes per epoch <= 0.55 x the
pack and <= 0.75 x LRU's.

--first-epoch measures what writing the cache costs instead: one epoch per loader, no cache against
cache=Cache(folder, limit) on an empty folder (cold), interleaved over --rounds rounds; one line per
loader with the median samples/s of that first epoch, the cached one's with its ratio to the uncached
one and the MB its folder holds once the writes of that epoch (and its prefetch of the next) are done.
Goal (issue 31): cached cold >= 0.95 x no cache.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _corpus import make_jpeg_corpus  # noqa: E402

GOAL_PACK, GOAL_LRU = 0.55, 0.75
GOAL_FIRST_EPOCH = 0.95


def pack_wds(corpus: Path, out: Path, block_samples: int) -> Path:
    """The corpus packed once (wds, 16 MB shards), reused while its manifest is there."""
    from corgi_io import PackOptions, pack

    if not (out / "manifest.json").exists():
        pack(corpus, out, PackOptions(format="wds", block_samples=block_samples, shard_bytes=16 << 20),
             workers=2, progress=False, overwrite=True)
    return out


def run_epochs(url: str, epochs: int, cache=None) -> tuple:
    """([remote bytes of each epoch], [seconds of each epoch], samples per epoch) of one loader with `cache`
    (a `Cache`, or None)."""
    from corgi_io.loaders import CorgiPileDataset

    dataset = CorgiPileDataset(url, seed=0, decode=None, cache=cache)
    fetched, seconds = [], []
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        before, start = dataset.storage.bytes_read, time.perf_counter()
        for _ in dataset:
            pass
        seconds.append(time.perf_counter() - start)
        if dataset.last_reader.cache is not None:
            dataset.last_reader.cache.wait_warm()  # its prefetch of the next epoch counts in this one
        fetched.append(dataset.storage.bytes_read - before)
    return fetched, seconds, len(dataset)


def report_bytes(runs: dict, pack_bytes: int) -> None:
    """One line per cached loader and epoch after the first: median remote MB, x pack, and Belady's x LRU."""
    def fetched(policy, epoch):
        return statistics.median(run[0][epoch] for run in runs[policy])

    for epoch in range(1, len(runs["lru"][0][0])):
        lru = fetched("lru", epoch)
        for policy in ("belady", "lru"):
            got = fetched(policy, epoch)
            goal = ""
            if policy == "belady":
                met = got <= GOAL_PACK * pack_bytes and got <= GOAL_LRU * lru
                goal = f"  goals <= {GOAL_PACK}x pack, <= {GOAL_LRU}x lru: {'met' if met else 'MISSED'}"
            print(f"cache {policy:6s} epoch {epoch}  remote {got / 1e6:8.2f} MB  {got / pack_bytes:5.2f}x pack  "
                  f"{got / lru:5.2f}x lru{goal}")


def report_rates(runs: dict) -> None:
    """One line per loader: median samples/s over the epochs after the first, and the ratio to the uncached loader."""
    rates = {name: statistics.median(len(seconds[1:]) * samples / sum(seconds[1:]) for _, seconds, samples in got)
             for name, got in runs.items()}
    for name, rate in rates.items():
        print(f"cache {name:6s} samples/s {rate:9.0f}  ratio {rate / rates['none']:5.2f}x vs none")


def first_epoch(url: str, caches: Path, limit: int, rounds: int) -> None:
    """The first epoch's samples/s without a cache and with a cold one, interleaved; one line per loader."""
    from corgi_io.loaders import Cache

    rates, kept = {"none": [], "cold": []}, []
    for round_ in range(rounds):
        for name in (("none", "cold") if round_ % 2 == 0 else ("cold", "none")):
            cache = Cache(caches / f"cold-{round_}", limit) if name == "cold" else None
            _, seconds, samples = run_epochs(url, 1, cache)  # then waits for the cache's writes
            rates[name].append(samples / seconds[0])
            if cache is not None:
                kept.append(sum(path.stat().st_size for path in cache_files(Path(cache.folder))))
    none, cold = (statistics.median(rates[name]) for name in ("none", "cold"))
    met = "met" if cold >= GOAL_FIRST_EPOCH * none else "MISSED"
    print(f"first epoch  no cache    samples/s {none:9.0f}")
    print(f"first epoch  cache cold  samples/s {cold:9.0f}  ratio {cold / none:5.2f}x vs no cache  "
          f"goal >= {GOAL_FIRST_EPOCH}x: {met}  (cached after the epoch: {statistics.median(kept) / 1e6:.1f} MB)")


def cache_files(folder: Path) -> list:
    """The cached pieces under a cache folder (not its lock or temporary files)."""
    return [path for path in folder.rglob("*") if path.is_file() and not path.name.startswith(".")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=6000)
    parser.add_argument("--block-samples", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--limit", type=float, default=0.5, help="cache limit, a fraction of the pack's bytes")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; lines give the median")
    parser.add_argument("--first-epoch", action="store_true",
                        help="measure the first epoch only: no cache against a cold cache")
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "remote_cache")
    args = parser.parse_args()
    from corgi_io.loaders import Cache
    from corgi_io.manifest import open_manifest
    from helpers.http_server import NginxServer

    corpus = make_jpeg_corpus(args.workdir / f"corpus-{args.n}", args.n, widths="mixture")
    root = pack_wds(corpus, args.workdir / f"pack-{args.n}-{args.block_samples}", args.block_samples)
    manifest = open_manifest(root)
    pack_bytes = sum(shard.bytes for shard in manifest.shards)
    limit = int(args.limit * pack_bytes)
    epochs = "first epoch only" if args.first_epoch else f"{args.epochs} epochs"
    print(f"# {manifest.num_samples} JPEGs, {len(manifest.blocks)} blocks, pack {pack_bytes / 1e6:.1f} MB, "
          f"cache limit {limit / 1e6:.1f} MB ({args.limit}x), {epochs}, nginx on 127.0.0.1, "
          f"median of {args.rounds} rounds")
    with NginxServer(args.workdir / "www") as server, tempfile.TemporaryDirectory(dir=args.workdir) as caches:
        served = args.workdir / "www" / "ds"
        shutil.rmtree(served, ignore_errors=True)
        shutil.copytree(root, served)
        url = f"{server.url}ds"
        if args.first_epoch:
            return first_epoch(url, Path(caches), limit, args.rounds)
        runs = {"none": [], "belady": [], "lru": []}
        for round_ in range(args.rounds):
            runs["none"].append(run_epochs(url, args.epochs))
            for policy in ("belady", "lru"):
                cache = Cache(Path(caches) / f"{policy}-{round_}", limit, policy=policy)
                runs[policy].append(run_epochs(url, args.epochs, cache))
    report_bytes(runs, pack_bytes)
    report_rates(runs)


if __name__ == "__main__":
    main()

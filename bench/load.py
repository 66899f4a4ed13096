"""Loader throughput, bytes only: CorgiPile against webdataset / tfrecord shuffle pipelines and full random access.

One corpus of long-tailed JPEGs is packed twice (wds and tfrecord, blocks of
--block-samples).  Every contender shuffles with the same buffer memory: CorgiPile
holds --buffer-blocks blocks, the streaming shuffles hold that many samples'
worth (buffer_blocks * mean samples per block).  Each is measured with a warm page cache
and with the shard files evicted (POSIX_FADV_DONTNEED).  Ratios are against the named
baseline measured in the same run.

    python bench/load.py [--n 10000] [--http] [--rounds 5]

First, the cost of checking every sample's checksum (verify_reads=True, the default) against
not checking: whole epochs of the wds pack, warm cache, the two modes interleaved, median of
--rounds rounds.

--http serves the wds pack from nginx on 127.0.0.1 and compares corgipile with "full", with
the remote default of 4 reads in flight and with a single reader (on loopback with 2 cores,
extra reads in flight help per-sample "full" and cost corgipile GIL time).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _corpus import drop_page_cache, make_jpeg_corpus  # noqa: E402


def rate(samples, seconds_budget: float):
    """(samples/s, MB/s) over an iterable of (payload bytes), stopping after `seconds_budget`."""
    count = nbytes = 0
    start = time.perf_counter()
    for data in samples:
        count += 1
        nbytes += len(data)
        if count % 256 == 0 and time.perf_counter() - start > seconds_budget:
            break
    elapsed = time.perf_counter() - start
    return count / elapsed, nbytes / 1e6 / elapsed


def corgi(root, shuffle, buffer_blocks, read_threads=None, verify_reads=True):
    from corgi_io.loaders import CorgiPileDataset

    dataset = CorgiPileDataset(root, shuffle=shuffle, buffer_blocks=buffer_blocks, seed=0, read_threads=read_threads,
                               verify_reads=verify_reads)
    return (sample["data"] for sample in dataset)


def epochs_rate(make, epochs: int) -> tuple:
    """(samples/s, MB/s) of `epochs` whole passes over fresh iterables of payloads from `make()`."""
    count = nbytes = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for data in make():
            count += 1
            nbytes += len(data)
    elapsed = time.perf_counter() - start
    return count / elapsed, nbytes / 1e6 / elapsed


def verify_cost(root, args, num_samples: int) -> None:
    """Checked against unchecked CorgiPile epochs, warm cache, interleaved, median of `args.rounds` rounds.

    Each measurement runs whole epochs for at least 2 s: a single epoch of a small pack takes
    a fraction of a second, where scheduling noise on a shared 2-core machine swamps a 10% effect.
    """
    modes = {"corgipile, checksums checked (default)": True, "corgipile, verify_reads=False": False}
    makers = {name: (lambda v=verify: corgi(root, "corgipile", args.buffer_blocks, verify_reads=v))
              for name, verify in modes.items()}
    fastest = max(epochs_rate(make, 1)[0] for make in makers.values())  # also warms the cache
    epochs = max(1, math.ceil(2.0 * fastest / num_samples))
    runs = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, make in makers.items():
            runs[name].append(epochs_rate(make, epochs))
    medians = {name: tuple(statistics.median(r[i] for r in rounds) for i in (0, 1)) for name, rounds in runs.items()}
    report("warm", medians, "corgipile, verify_reads=False")
    checked, unchecked = (medians[name][0] for name in modes)
    ratios = sorted(c[0] / u[0] for c, u in zip(*runs.values()))
    print(f"# checking costs {100 * (1 - checked / unchecked):.1f}% of unchecked throughput (median of {args.rounds} "
          f"interleaved rounds of {epochs} epochs; per-round ratios {ratios[0]:.2f}..{ratios[-1]:.2f}; target <= 10%)")


def webdataset_shuffle(root, buffer_samples):
    import webdataset as wds

    urls = sorted(str(p) for p in Path(root).glob("shard-*.tar"))
    pipeline = wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(buffer_samples)
    return (sample["jpg"] for sample in pipeline)


def tfrecord_shuffle(root, buffer_samples):
    from tfrecord.torch.dataset import MultiTFRecordDataset

    shards = sorted(p.name[:-len(".tfrecord")] for p in Path(root).glob("shard-*.tfrecord"))
    dataset = MultiTFRecordDataset(str(Path(root) / "{}.tfrecord"), str(Path(root) / "{}.tfrecord.index"),
                                   {s: 1.0 for s in shards}, description={"data": "byte", "label": "int"},
                                   shuffle_queue_size=buffer_samples, infinite=False)
    return (bytes(sample["data"]) for sample in dataset)


def pack_both(corpus: Path, out: Path, block_samples: int) -> dict:
    from corgi_io import PackOptions, pack

    roots = {}
    for fmt in ("wds", "tfrecord"):
        roots[fmt] = out / fmt
        pack(corpus, roots[fmt], PackOptions(format=fmt, block_samples=block_samples, shard_bytes=64 << 20),
             workers=2, progress=False)
    return roots


def report(cache: str, results: dict, baseline: str) -> None:
    for name, (samples_s, mb_s) in results.items():
        print(f"load {cache:5s} {name:44s} {samples_s:9.0f} samples/s {mb_s:8.1f} MB/s "
              f"ratio {samples_s / results[baseline][0]:6.2f}x vs {baseline}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--block-samples", type=int, default=1024, help="pack default; blocks also stop at 4 MiB")
    parser.add_argument("--buffer-blocks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="time budget per measurement")
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the checked/unchecked comparison")
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "load")
    args = parser.parse_args()
    corpus = make_jpeg_corpus(args.workdir / "corpus", args.n)
    roots = pack_both(corpus, args.workdir / "packs", args.block_samples)
    from corgi_io.manifest import open_manifest

    manifest = open_manifest(roots["wds"])
    buffer_samples = int(args.buffer_blocks * manifest.blocks.count.mean())
    print(f"# {manifest.num_samples} JPEGs, {manifest.samples.bytes.sum() / 1e6:.0f} MB, {len(manifest.blocks)} blocks "
          f"of {args.block_samples}; buffer {args.buffer_blocks} blocks = {buffer_samples} samples")
    if args.http:
        run_http(roots["wds"], args, manifest)
        return
    verify_cost(roots["wds"], args, manifest.num_samples)
    contenders = {
        "corgipile (wds pack)": lambda: corgi(roots["wds"], "corgipile", args.buffer_blocks),
        "corgipile (tfrecord pack)": lambda: corgi(roots["tfrecord"], "corgipile", args.buffer_blocks),
        f"webdataset .shuffle({buffer_samples})": lambda: webdataset_shuffle(roots["wds"], buffer_samples),
        f"tfrecord shuffle_queue_size={buffer_samples}": lambda: tfrecord_shuffle(roots["tfrecord"], buffer_samples),
        "full (per-sample reads)": lambda: corgi(roots["wds"], "full", args.buffer_blocks),
    }
    shard_files = [str(p) for root in roots.values() for p in root.glob("shard-*")]
    for cache in ("warm", "cold"):
        results = {}
        for name, make in contenders.items():
            if cache == "warm":
                rate(make(), args.seconds)  # one pass to warm the cache
            else:
                drop_page_cache(shard_files)
            results[name] = rate(make(), args.seconds)
        report(cache, results, f"webdataset .shuffle({buffer_samples})")


def run_http(root: Path, args, manifest) -> None:
    import shutil

    from http_server import NginxServer

    with NginxServer(args.workdir / "www") as server:
        served = args.workdir / "www" / "ds"
        shutil.rmtree(served, ignore_errors=True)
        shutil.copytree(root, served)
        url = f"{server.url}/ds"
        for threads in (None, 1):  # the remote default (4 reads in flight), and a single reader
            label = "default 4 reads in flight" if threads is None else "1 read in flight"
            results = {f"corgipile over HTTP, {label}": rate(corgi(url, "corgipile", args.buffer_blocks, threads),
                                                              args.seconds),
                       f"full over HTTP, {label}": rate(corgi(url, "full", args.buffer_blocks, threads), args.seconds)}
            report("http", results, f"full over HTTP, {label}")


if __name__ == "__main__":
    main()

"""Samples through DataLoader workers: the dataset's own batches (one object per batch) against sample dicts.

With `num_workers > 0` everything a worker yields is serialised through the DataLoader's queue.
The baseline yields sample dicts and lets the DataLoader batch them with a trivial collate (the
list of samples, issue 10's 2-worker line); corgi batches yield one collated batch per step
(`CorgiPileDataset(batching=Batches(B))`, `collate_samples`: raw bytes as one `PackedBytes` buffer plus
offsets) and the DataLoader passes them through (`batch_size=None`).  The middle line isolates the
buffer: batch mode, but each batch a plain list of sample dicts (`Batches(B, collate_fn=list)`).

Under "corgipile" a known batch size also composes size-balanced batches inside each buffer
(schedule/batches.py); the first line says what that planning costs per epoch, and `--shuffle block`
(no composition) measures the transfer alone.

Corpus: long-tailed JPEGs (bench/_corpus.py), bytes only, one wds pack, 2 workers, whole epochs,
warm page cache and evicted (POSIX_FADV_DONTNEED).  Contenders are interleaved within each round;
each line is the median of --rounds rounds, with its ratio against the baseline of the same rounds,
and the CPU time per sample of the main process and its workers together (less sensitive than
wall time to other load on a shared machine).

    python bench/worker_transfer.py [--n 20000] [--rounds 5] [--workers 2] [--batch-size 64] [--shuffle block]
                                    [--corpus DIR]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _corpus import drop_page_cache, make_jpeg_corpus  # noqa: E402

BASELINE = "sample dicts + DataLoader(batch_size=B, collate_fn=list)"


def as_list(samples: list) -> list:
    """The trivial collate of the baseline: the batch is the list of sample dicts."""
    return samples


def contenders(root, batch_size: int, workers: int, shuffle: str) -> dict:
    """name -> a function that builds a fresh DataLoader over `root`."""
    import torch
    from corgi_io.loaders import Batches, CorgiPileDataset, Shuffle

    def loader(batching, **loader_options):
        dataset = CorgiPileDataset(root, seed=0, shuffle=Shuffle(shuffle), batching=batching)
        return torch.utils.data.DataLoader(dataset, num_workers=workers, **loader_options)

    return {
        BASELINE: lambda: loader(None, batch_size=batch_size, collate_fn=as_list),
        "corgi batches, collate_fn=list (no buffer)": lambda: loader(
            Batches(batch_size, collate_fn=list), batch_size=None),
        "corgi batches, collate_samples (PackedBytes)": lambda: loader(Batches(batch_size), batch_size=None),
    }


def plan_seconds(root, batch_size, workers: int, shuffle: str) -> float:
    """Seconds that all of one rank's workers spend on their buffer plans in one epoch (no data read)."""
    from corgi_io.loaders import Batches, CorgiPileDataset, Shuffle

    batching = None if batch_size is None else Batches(batch_size)
    dataset = CorgiPileDataset(root, seed=0, shuffle=Shuffle(shuffle), batching=batching)
    start = time.perf_counter()
    for worker in range(max(1, workers)):
        for _ in dataset.plan(worker, workers):
            pass
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the DataLoader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def epoch_rate(make) -> tuple:
    """(samples per second, CPU microseconds per sample) of one whole epoch of a fresh loader, start-up included."""
    count = 0
    start, cpu = time.perf_counter(), cpu_seconds()
    loader = make()
    for batch in loader:
        count += len(batch) if isinstance(batch, list) else len(batch["key"])
    del loader  # its workers exit and are reaped, so their CPU time is counted
    wall = time.perf_counter() - start
    return count / wall, 1e6 * (cpu_seconds() - cpu) / count


def measure(makers: dict, rounds: int, before=None) -> dict:
    """name -> per-round (samples/s, CPU us per sample), the contenders interleaved within each round."""
    runs = {name: [] for name in makers}
    for _ in range(rounds):
        for name, make in makers.items():
            if before is not None:
                before()
            runs[name].append(epoch_rate(make))
    return runs


def report(cache: str, runs: dict, mean_bytes: float) -> None:
    base = [rate for rate, _ in runs[BASELINE]]
    for name, results in runs.items():
        rates = [rate for rate, _ in results]
        ratios = sorted(r / b for r, b in zip(rates, base))
        median = statistics.median(rates)
        cpu = statistics.median(c for _, c in results)
        print(f"worker_transfer {cache:4s} {name:56s} {median:8.0f} samples/s {median * mean_bytes / 1e6:7.1f} MB/s "
              f"ratio {median / statistics.median(base):5.2f}x vs baseline "
              f"(per-round {ratios[0]:.2f}..{ratios[-1]:.2f}) CPU {cpu:5.1f} us/sample")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shuffle", default="corgipile", help="the shuffle mode of every contender")
    parser.add_argument("--corpus", type=Path, help="an existing make_jpeg_corpus folder of --n JPEGs (read only)")
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "worker_transfer")
    args = parser.parse_args()
    from corgi_io import PackOptions, pack
    from corgi_io.manifest import open_manifest

    corpus = make_jpeg_corpus(args.corpus or args.workdir / "corpus", args.n)
    root = args.workdir / f"pack{args.n}"
    if not (root / "manifest.json").exists():
        pack(corpus, root, PackOptions(format="wds", shard_bytes=64 << 20), workers=2, progress=False)
    manifest = open_manifest(root)
    mean_bytes = float(manifest.samples.bytes.mean())
    print(f"# {manifest.num_samples} JPEGs, {manifest.samples.bytes.sum() / 1e6:.0f} MB, {len(manifest.blocks)} "
          f"blocks; DataLoader num_workers={args.workers}, batches of {args.batch_size}, shuffle={args.shuffle!r}, "
          f"whole epochs, median of {args.rounds} interleaved rounds")
    plans = [plan_seconds(root, size, args.workers, args.shuffle) for size in (None, args.batch_size)]
    print(f"# buffer plans of one rank's workers per epoch: {plans[0]:.3f} s over samples, {plans[1]:.3f} s with "
          f"batch_size={args.batch_size} ({1e6 * (plans[1] - plans[0]) / manifest.num_samples:.1f} us per sample more)")
    makers = contenders(root, args.batch_size, args.workers, args.shuffle)
    measure(makers, 1)  # warm the page cache and the imports
    report("warm", measure(makers, args.rounds), mean_bytes)
    shards = [str(p) for p in root.glob("shard-*")]
    report("cold", measure(makers, args.rounds, before=lambda: drop_page_cache(shards)), mean_bytes)


if __name__ == "__main__":
    main()

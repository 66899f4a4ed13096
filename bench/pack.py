"""Pack throughput: `corgi pack` (1 and 2 workers) against webdataset.ShardWriter and tfrecord.TFRecordWriter loops.

All contenders write the same long-tailed JPEGs (20,000 by default) with their labels from a warm
page cache, into shards of at most --shard-mib MiB (corgi's --shard-bytes, ShardWriter's maxsize);
corgi's time includes the walk, size probing, checksums, the fsync'd shards and the manifest.
The contenders run interleaved, round after round, and each line is the median of the rounds,
with its ratio against a baseline measured in the same run.

Mosaic's MDSWriter is not a contender: mosaicml-streaming cannot be installed beside this project's
torch (see docs/benchmarks.md).

When Dask distributed imports (``corgi-io[dask]``), ``corgi pack --dask local:2`` runs too: the same
shard tasks on a LocalCluster of 2 single-thread worker processes, started once before the rounds
(as an already running cluster would be; its start-up is printed, not timed), with its ratio
against the local pool of 2 processes.

    python bench/pack.py [--n 20000] [--rounds 5] [--shard-mib 512] [--workdir bench/out/pack]
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import corpus_files, make_jpeg_corpus  # noqa: E402

TARGETS = {  # (contender, baseline) -> the speed ratio that issue 9 asks for
    ("corgi pack --workers 2", "corgi pack --workers 1"): 1.5,
    ("corgi pack --workers 2", "webdataset.ShardWriter"): 2.0,
}
DASK = "corgi pack --dask local:2"


def run_shardwriter(files, out: Path, shard_bytes: int):
    import webdataset as wds

    out.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=shard_bytes, verbose=0) as sink:
        for i, (path, label) in enumerate(files):
            with open(path, "rb") as f:
                sink.write({"__key__": f"{i:08d}", "jpg": f.read(), "cls": label})


def run_tfrecordwriter(files, out: Path, shard_bytes: int):
    from tfrecord import TFRecordWriter

    out.mkdir(parents=True, exist_ok=True)
    writer = TFRecordWriter(str(out / "shard-000000.tfrecord"))
    for i, (path, label) in enumerate(files):
        with open(path, "rb") as f:
            writer.write({"key": (f"{i:08d}".encode(), "byte"), "data": (f.read(), "byte"), "label": (label, "int")})
    writer.close()


def run_corgi(source: Path, out: Path, shard_bytes: int, workers: int = 1, client=None):
    from corgi_io import PackOptions, pack

    pack(source, out, PackOptions(format="wds", shard_bytes=shard_bytes), workers=workers, client=client,
         overwrite=True, progress=False)


def local_dask_client(stack: contextlib.ExitStack, workers: int = 2):
    """(client, start-up seconds) of a LocalCluster of `workers` single-thread processes, closed with `stack`;
    (None, None) when Dask distributed is not installed."""
    try:
        import distributed
    except ImportError:
        return None, None
    start = time.perf_counter()
    cluster = stack.enter_context(distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                                           dashboard_address=":0"))
    return stack.enter_context(distributed.Client(cluster)), time.perf_counter() - start


def run_rounds(contenders: dict, out: Path, rounds: int) -> dict:
    """{name: median seconds} of the contenders run interleaved, `rounds` times each."""
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            shutil.rmtree(out, ignore_errors=True)
            start = time.perf_counter()
            run(out)
            times[name].append(time.perf_counter() - start)
    shutil.rmtree(out, ignore_errors=True)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shard-mib", type=int, default=512, help="shard size for every contender (corgi's default)")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/pack"))
    args = parser.parse_args()
    source = make_jpeg_corpus(args.workdir / f"corpus-{args.n}", args.n)
    files = corpus_files(source)
    megabytes = sum(Path(p).stat().st_size for p, _ in files) / 1e6
    for path, _ in files:  # warm the page cache for every contender alike
        Path(path).read_bytes()
    shard_bytes = args.shard_mib << 20
    contenders = {
        "webdataset.ShardWriter": lambda out: run_shardwriter(files, out, shard_bytes),
        "tfrecord.TFRecordWriter": lambda out: run_tfrecordwriter(files, out, shard_bytes),
        "corgi pack --workers 1": lambda out: run_corgi(source, out, shard_bytes, 1),
        "corgi pack --workers 2": lambda out: run_corgi(source, out, shard_bytes, 2),
    }
    with contextlib.ExitStack() as stack:
        client, startup = local_dask_client(stack)
        if client is not None:
            contenders[DASK] = lambda out: run_corgi(source, out, shard_bytes, client=client)
        median = run_rounds(contenders, args.workdir / "out", args.rounds)
    print(f"# {len(files)} JPEGs, {megabytes:.1f} MB, shards of at most {args.shard_mib} MiB, median of "
          f"{args.rounds} interleaved rounds, warm page cache")
    for name, seconds in median.items():
        print(f"pack {name:26s} {len(files) / seconds:9.0f} samples/s {megabytes / seconds:8.1f} MB/s "
              f"ratio {median['webdataset.ShardWriter'] / seconds:5.2f}x vs webdataset.ShardWriter")
    for (name, baseline), target in TARGETS.items():
        ratio = median[baseline] / median[name]
        print(f"target {name} vs {baseline}: {ratio:5.2f}x (target >= {target}x: "
              f"{'met' if ratio >= target else 'NOT met'})")
    if DASK in median:
        print(f"dask {DASK} vs corgi pack --workers 2: {median['corgi pack --workers 2'] / median[DASK]:5.2f}x "
              f"(LocalCluster start-up {startup:.1f} s, not timed)")


if __name__ == "__main__":
    main()

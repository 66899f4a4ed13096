"""Pack throughput: `corgi pack` (1 and 2 workers) against webdataset.ShardWriter and tfrecord.TFRecordWriter loops.

All contenders write the same long-tailed JPEGs (20,000 by default) with their labels from a warm
page cache, into shards of at most --shard-mib MiB (corgi's --shard-bytes, ShardWriter's maxsize);
corgi's time includes the walk, size probing, checksums, the fsync'd shards and the manifest.
The contenders run interleaved, round after round, and each line is the median of the rounds,
with its ratio against a baseline measured in the same run.

Mosaic's MDSWriter is not a contender: mosaicml-streaming cannot be installed beside this project's
torch (see docs/benchmarks.md).

    python bench/pack.py [--n 20000] [--rounds 5] [--shard-mib 512] [--workdir bench/out/pack]
"""
from __future__ import annotations

import argparse
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


def run_corgi(source: Path, out: Path, shard_bytes: int, workers: int):
    from corgi_io import PackOptions, pack

    pack(source, out, PackOptions(format="wds", shard_bytes=shard_bytes), workers=workers, overwrite=True,
         progress=False)


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
    out = args.workdir / "out"
    times = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, run in contenders.items():
            shutil.rmtree(out, ignore_errors=True)
            start = time.perf_counter()
            run(out)
            times[name].append(time.perf_counter() - start)
    shutil.rmtree(out, ignore_errors=True)
    median = {name: statistics.median(seconds) for name, seconds in times.items()}
    print(f"# {len(files)} JPEGs, {megabytes:.1f} MB, shards of at most {args.shard_mib} MiB, median of "
          f"{args.rounds} interleaved rounds, warm page cache")
    for name, seconds in median.items():
        print(f"pack {name:26s} {len(files) / seconds:9.0f} samples/s {megabytes / seconds:8.1f} MB/s "
              f"ratio {median['webdataset.ShardWriter'] / seconds:5.2f}x vs webdataset.ShardWriter")
    for (name, baseline), target in TARGETS.items():
        ratio = median[baseline] / median[name]
        print(f"target {name} vs {baseline}: {ratio:5.2f}x (target >= {target}x: "
              f"{'met' if ratio >= target else 'NOT met'})")


if __name__ == "__main__":
    main()

"""Pack throughput: `corgi pack` (1 and 2 workers) against plain webdataset.ShardWriter and tfrecord.TFRecordWriter loops.

All four write the same ~3,000 long-tailed JPEGs with their labels from a warm page
cache; corgi's time includes size probing, checksums and the manifest.  Each result is
the best of --repeat runs; ratios are against ShardWriter measured in the same run.

    python bench/pack.py [--n 3000] [--repeat 3] [--workdir bench/out/pack]
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import corpus_files, make_jpeg_corpus  # noqa: E402
from _timing import best_of  # noqa: E402


def run_shardwriter(files, out: Path):
    import webdataset as wds

    out.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=512 << 20, verbose=0) as sink:
        for i, (path, label) in enumerate(files):
            with open(path, "rb") as f:
                sink.write({"__key__": f"{i:08d}", "jpg": f.read(), "cls": label})


def run_tfrecordwriter(files, out: Path):
    from tfrecord import TFRecordWriter

    out.mkdir(parents=True, exist_ok=True)
    writer = TFRecordWriter(str(out / "shard-000000.tfrecord"))
    for i, (path, label) in enumerate(files):
        with open(path, "rb") as f:
            writer.write({"key": (f"{i:08d}".encode(), "byte"), "data": (f.read(), "byte"), "label": (label, "int")})
    writer.close()


def run_corgi(source: Path, out: Path, workers: int):
    from corgi_io.packing import PackOptions, pack

    pack(source, out, PackOptions(format="wds"), workers=workers, overwrite=True, progress=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/pack"))
    args = parser.parse_args()
    source = make_jpeg_corpus(args.workdir / "corpus", args.n)
    files = corpus_files(source)
    megabytes = sum(Path(p).stat().st_size for p, _ in files) / 1e6
    for path, _ in files:  # warm the page cache for every contender alike
        Path(path).read_bytes()
    contenders = {
        "webdataset.ShardWriter": lambda out: run_shardwriter(files, out),
        "tfrecord.TFRecordWriter": lambda out: run_tfrecordwriter(files, out),
        "corgi pack --workers 1": lambda out: run_corgi(source, out, 1),
        "corgi pack --workers 2": lambda out: run_corgi(source, out, 2),
    }
    out = args.workdir / "out"
    times = {name: best_of(lambda fn=fn: fn(out), args.repeat, before=lambda: shutil.rmtree(out, ignore_errors=True))
             for name, fn in contenders.items()}
    baseline = times["webdataset.ShardWriter"]
    print(f"# {len(files)} JPEGs, {megabytes:.1f} MB, best of {args.repeat}, warm page cache")
    for name, seconds in times.items():
        print(f"pack {name:26s} {len(files) / seconds:9.0f} samples/s {megabytes / seconds:8.1f} MB/s "
              f"ratio {baseline / seconds:5.2f}x vs webdataset.ShardWriter")
    shutil.rmtree(args.workdir / "out", ignore_errors=True)


if __name__ == "__main__":
    main()

"""Pack-time resize: `corgi pack --image-max-side 256 --workers 2` against `litdata.optimize` with a resize fn.

Both contenders read the same folder of ImageNet-sized JPEGs (5,000 by default, 500x375 and 375x500,
about 110 KB each, in class folders, from a warm page cache), shrink each to a longer side of
--max-side with Pillow's LANCZOS (aspect kept), encode it as JPEG at quality 90, and write it with
its label into chunks or shards of at most --shard-mib MiB.  litdata's fn does what a user writes:
Image.open -> resize(LANCZOS) -> save(JPEG), returning {"image": bytes, "label": int}; it runs
in `litdata.optimize(num_workers=2)`.  corgi's time includes its walk, size probing, checksums,
fsync'd shards and manifest; litdata's its worker start-up (spawn, its default).  The contenders
run interleaved, round after round; each line is the median of the rounds with its ratio against
litdata.optimize (above 1: faster).  Issue 18 asks for corgi >= 1.5x.

    python bench/pack_resize.py [--n 5000] [--rounds 3] [--max-side 256] [--shard-mib 64]
                                [--workdir bench/out/pack_resize]

litdata is optional (bench/_litdata.py): without it the bench says so in one line and prints corgi's numbers.
    pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 requests
"""
from __future__ import annotations

import argparse
import functools
import io
import sys
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _litdata  # noqa: E402
from _litdata import LITDATA, WORKERS, fixed_cost_line, ratio_text  # noqa: E402
from _corpus import make_imagenet_folder  # noqa: E402
from pack import run_rounds  # noqa: E402

from corgi_io import PackOptions, pack  # noqa: E402
from corgi_io.packing.transforms.image import fit  # noqa: E402

QUALITY = 90
TARGET = 1.5  # issue 18 section 4: corgi >= 1.5x litdata.optimize


def litdata_resize(path: str, max_side: int) -> dict:
    """litdata's fn: one file opened, resized to a longer side of `max_side` (LANCZOS), encoded as JPEG."""
    with Image.open(path) as image:
        out = io.BytesIO()
        image.resize(fit(*image.size, max_side), Image.Resampling.LANCZOS).save(out, format="JPEG", quality=QUALITY)
    return {"image": out.getvalue(), "label": int(Path(path).parent.name.split("_")[1])}


def run_corgi(source: Path, out: Path, max_side: int, shard_bytes: int) -> None:
    """`corgi pack SOURCE OUT --image-max-side N --image-quality 90 --shard-bytes B --workers 2`."""
    options = PackOptions(shard_bytes=shard_bytes, image_max_side=max_side, image_quality=QUALITY)
    pack(source, out, options, workers=WORKERS, overwrite=True, progress=False)


def contenders(source: Path, files: list, args) -> tuple:
    """({name: run(out)}, fixed_cost(out) or None): litdata.optimize first when it imports (else its note is
    printed), then corgi; fixed_cost times litdata on 2 inputs only (`_litdata.fixed_cost`)."""
    shard_bytes = args.shard_mib << 20
    litdata, note = _litdata.import_litdata()
    runs, fixed_cost = {}, None
    if litdata is None:
        print(note)
    else:
        fn = functools.partial(litdata_resize, max_side=args.max_side)
        runs[LITDATA] = lambda out: _litdata.optimize(litdata, fn, files, out, WORKERS, shard_bytes)
        fixed_cost = lambda out: _litdata.fixed_cost(litdata, fn, files, out, WORKERS, shard_bytes)  # noqa: E731
    runs[f"corgi pack --image-max-side {args.max_side} --workers {WORKERS}"] = \
        lambda out: run_corgi(source, out, args.max_side, shard_bytes)
    return runs, fixed_cost


def report(median: dict, n: int, megabytes: float, args, fixed: float | None) -> None:
    """One line per contender (images/s, its ratio against litdata.optimize), then the issue's target;
    `fixed`: the seconds of litdata's fixed cost, in a comment line."""
    print(f"# {n} JPEGs 500x375/375x500, {megabytes:.1f} MB -> longer side {args.max_side} (LANCZOS, JPEG q{QUALITY}), "
          f"chunks/shards of {args.shard_mib} MiB, median of {args.rounds} interleaved rounds, warm page cache")
    if fixed is not None:
        print(fixed_cost_line(fixed, median))
    baseline = median.get(LITDATA)
    for name, seconds in median.items():
        print(f"pack-resize {name:42s} {n / seconds:8.0f} images/s {megabytes / seconds:7.1f} MB/s"
              f"{ratio_text(median, seconds)}")
    if baseline is not None:
        corgi = next(name for name in median if name.startswith("corgi"))
        ratio = baseline / median[corgi]
        verdict = "met" if ratio >= TARGET else "NOT met"
        print(f"target {corgi} vs {LITDATA}: {ratio:5.2f}x (target >= {TARGET}x: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-side", type=int, default=256)
    parser.add_argument("--shard-mib", type=int, default=64, help="litdata's chunk_bytes and corgi's --shard-bytes")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/pack_resize"))
    args = parser.parse_args()
    source = make_imagenet_folder(args.workdir / f"imagenet-{args.n}", args.n)
    files = sorted(str(p) for p in source.glob("class_*/*.jpg"))
    megabytes = sum(Path(p).stat().st_size for p in files) / 1e6
    for path in files:  # warm the page cache for every contender alike
        Path(path).read_bytes()
    runs, fixed_cost = contenders(source, files, args)
    median = run_rounds(runs, args.workdir / "out", args.rounds)
    report(median, len(files), megabytes, args, None if fixed_cost is None else fixed_cost(args.workdir / "out"))


if __name__ == "__main__":
    main()

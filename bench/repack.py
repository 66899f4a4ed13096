"""Repacking WebDataset tars: `corgi pack --from wds` (1 and 2 workers) against `litdata.optimize` (2 workers).

The input is 20,000 samples by default (a small JPEG of about 10-30 KB, a caption and a class id
each) in tars of --per-tar samples written once by `webdataset.TarWriter` (and reused by later
runs), read from a warm page cache.  The contenders, each from the same tars to a fresh output
folder (removed before each call, untimed):

* ``corgi pack --workers N``: the Python API, ``pack(TARS, OUT, PackOptions(), workers=N)``, the
  code `corgi pack TARS OUT --workers N` runs (the form is detected: a folder of .tar files); a
  task per tar writes its own shards; the time includes the listing, checksums, the fsync'd
  shards, the unit records and the manifest;
* ``litdata.optimize``: ``optimize(fn=read_tar, inputs=[tar paths], num_workers=2,
  chunk_bytes="64MB")``, where `read_tar` yields the samples of one tar read by
  ``webdataset.WebDataset(path)`` (raw bytes, nothing decoded), as a dict of key, jpg, txt, cls.

Each tar's samples fit one 64 MB chunk or shard, so neither chunk nor shard size is a factor.
Both run in this process (their worker processes are their own), timed alike with
`_timing.interleaved_medians`: the contenders take turns, round after round, and each line is
the median of the rounds, with its ratio against litdata.optimize measured in the same run
(against corgi pack --workers 1 when litdata does not import).  Targets (issue 18, section 4):
corgi --workers 2 >= 1.5x litdata.optimize; the w2/w1 ratio is printed too.

litdata is not a dependency (see pyproject.toml):
``pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 requests``.

    python bench/repack.py [--n 20000] [--per-tar 1000] [--rounds 5] [--workdir bench/out/repack]
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import make_wds_tars  # noqa: E402
from _timing import interleaved_medians  # noqa: E402

LITDATA = "litdata.optimize --workers 2"
CORGI = "corgi pack --workers {}"
TARGETS = {  # (contender, baseline) -> the speed ratio that issue 18 asks for; None: printed, no target
    (CORGI.format(2), LITDATA): 1.5,
    (CORGI.format(2), CORGI.format(1)): None,
}


def jpeg_caption_sample(seed: int = 0):
    """`sample(i)` for `make_wds_tars`: a JPEG of 112..224 px (about 10-30 KB: a smooth picture plus noise), a caption
    and a class id out of 100, drawn in order from one generator."""
    from PIL import Image

    rng = np.random.default_rng(seed)

    def sample(i: int) -> dict:
        width, height = rng.integers(112, 225, 2)
        small = rng.integers(0, 256, (height // 4, width // 4, 3), dtype=np.uint8)
        picture = np.asarray(Image.fromarray(small).resize((width, height), Image.BILINEAR), dtype=np.int16)
        picture = np.clip(picture + rng.integers(-24, 25, picture.shape), 0, 255).astype(np.uint8)
        jpeg = io.BytesIO()
        Image.fromarray(picture).save(jpeg, format="JPEG", quality=90)
        return {"jpg": jpeg.getvalue(), "txt": f"a photo of thing {i} in class {i % 100}", "cls": i % 100}

    return sample


def read_tar(path: str):
    """litdata's `fn`: the samples of one tar, read by webdataset (module level: litdata's workers import it)."""
    import webdataset as wds

    for sample in wds.WebDataset(path, shardshuffle=False, empty_check=False):
        yield {"key": sample["__key__"], "jpg": sample["jpg"], "txt": sample["txt"], "cls": sample["cls"]}


def run_corgi(tars: Path, out: Path, workers: int) -> int:
    from corgi_io import PackOptions, pack

    return pack(str(tars), out, PackOptions(), workers=workers, overwrite=True, progress=False).num_samples


def run_litdata(paths: list, out: Path) -> int:
    import litdata

    litdata.optimize(fn=read_tar, inputs=[str(path) for path in paths], output_dir=str(out), num_workers=2,
                     chunk_bytes="64MB", verbose=False)
    return sum(chunk["chunk_size"] for chunk in json.loads((out / "index.json").read_text())["chunks"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--per-tar", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/repack"))
    args = parser.parse_args()
    tars = args.workdir / f"tars-{args.n}-{args.per_tar}"
    paths = make_wds_tars(tars, args.n, args.per_tar, jpeg_caption_sample())
    megabytes = sum(path.stat().st_size for path in paths) / 1e6
    for path in paths:  # warm the page cache for every contender alike
        path.read_bytes()
    out = (args.workdir / "out").absolute()
    samples = {}

    def counted(name, run):
        def call():
            samples[name] = run()
        return call

    contenders = {CORGI.format(w): counted(CORGI.format(w), lambda w=w: run_corgi(tars, out, w)) for w in (1, 2)}
    try:
        import litdata  # noqa: F401
        contenders[LITDATA] = counted(LITDATA, lambda: run_litdata(paths, out))
        baseline = LITDATA
    except ImportError as exc:
        print(f"# litdata: not importable ({exc}); pip install --no-deps litdata==0.2.76 lightning-utilities "
              f"filelock boto3 requests")
        baseline = CORGI.format(1)
    median = interleaved_medians(contenders, args.rounds, before=lambda: shutil.rmtree(out, ignore_errors=True))
    shutil.rmtree(out, ignore_errors=True)
    assert all(count == args.n for count in samples.values()), samples
    print(f"# {args.n} JPEG+caption samples, {megabytes:.1f} MB in {len(paths)} tars of {args.per_tar} "
          f"(webdataset.TarWriter), median of {args.rounds} interleaved rounds, warm page cache")
    for name, seconds in median.items():
        print(f"repack {name:28s} {args.n / seconds:9.0f} samples/s {megabytes / seconds:8.1f} MB/s "
              f"ratio {median[baseline] / seconds:5.2f}x vs {baseline}")
    for (name, against), target in TARGETS.items():
        if against in median:
            ratio = median[against] / median[name]
            verdict = f"target >= {target}x: {'met' if ratio >= target else 'NOT met'}" if target else "no target"
            print(f"target {name} vs {against}: {ratio:5.2f}x ({verdict})")


if __name__ == "__main__":
    main()

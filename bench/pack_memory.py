"""Driver memory of `corgi pack`: peak RSS of the packing process at 5x10^4, 2x10^5 and 5x10^5 tiny files.

Each pack runs in a fresh interpreter (`--workers 2` by default, so the driver only walks, plans,
hands out shard tasks and writes the manifest).  Two peaks of the driver alone (workers excluded):

* peak RSS - VmHWM, everything resident, including file pages the driver maps (its libraries,
  a constant whatever the corpus; reopening the manifest at the end of `pack()` adds 0.2 MiB).
  Not ru_maxrss: Linux carries the parent's peak into it across the fork and exec of the fresh
  interpreter, so it would read this script's own peak (over 200 MiB once webdataset has
  imported torch to write the tars of --from-tars);
* peak anonymous RSS - RssAnon, sampled every 10 ms: the driver's own memory (columns, plan, tasks).

The baseline is the smallest corpus, measured in the same run: the growth per file is
(peak at N - peak at the smallest N) / (N - smallest N).  Target: <= 64 B/file.

The corpora are 1 KB text files in 1,000 class folders, ImageNet-like names
(``n00000123/n00000123_000456.txt``), written with os.open/os.write (about 15 s for 5x10^5).

``--from-tars`` (issue 18, section 4): the driver of a repack of WebDataset tars instead, ``corgi
pack --from wds`` (default sizes 10^5 and 10^6, ``--workers 1``); the corpora are tiny samples (a
1-byte .txt and a .cls of 1,000 classes) written by `webdataset.TarWriter` into tars of --per-tar
samples (about 20 s per 10^5). With --workers 1 the unit tasks run in the driver, so its peak
includes one unit's record columns (about 90 B per sample of that unit, twice that while the record
is saved, freed when the unit is done: a constant for a fixed --per-tar); what grows with the corpus
is the manifest, built from the unit records a column at a time (unit_manifest.py). Same target.

    python bench/pack_memory.py [--sizes 50000 200000 500000] [--workers 2] [--workdir bench/out/pack_memory]
    python bench/pack_memory.py --from-tars [--sizes 100000 1000000] [--per-tar 10000] [--workers 1]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import make_wds_tars  # noqa: E402

TARGET_BYTES_PER_FILE = 64
CLASSES = 1000
PAYLOAD = (b"corgi pack tiny file " * 49)[:1000] + b"\n"
DRIVER = """
import sys, threading, time
from corgi_io import PackOptions, pack

def status(field):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(field + ":"))

def anonymous():
    return status("RssAnon")

peak = [anonymous()]
def sample():
    while True:
        peak[0] = max(peak[0], anonymous())
        time.sleep(0.01)

threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
manifest = pack(sys.argv[1], sys.argv[2], PackOptions(format="wds", source_form=sys.argv[4] or None),
                workers=int(sys.argv[3]), progress=False)
seconds = time.perf_counter() - start
print(manifest.num_samples, status("VmHWM"), max(peak[0], anonymous()), seconds)
"""


def make_tiny_corpus(root: Path, count: int) -> Path:
    """`count` 1 KB text files in CLASSES folders (reused when complete)."""
    marker = root.with_name(f"{root.name}.complete-{count}")  # beside the corpus: packs would skip a file inside
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    for label in range(CLASSES):
        os.makedirs(root / f"n{label:08d}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for i in range(count):
        label = i % CLASSES
        fd = os.open(f"{root}/n{label:08d}/n{label:08d}_{i:06d}.txt", flags, 0o644)
        os.write(fd, PAYLOAD)
        os.close(fd)
    marker.touch()
    return root


def make_tiny_tars(root: Path, count: int, per_tar: int) -> Path:
    """`count` tiny samples (a 1-byte .txt, a .cls) in tars of `per_tar` under `root` (reused when complete)."""
    make_wds_tars(root, count, per_tar, lambda i: {"txt": b"x", "cls": i % CLASSES})
    return root


def driver_peak(source: Path, out: Path, workers: int, form: str = "") -> tuple:
    """(samples, driver peak RSS, driver peak anonymous RSS, seconds) of one pack in a fresh interpreter; `form`:
    its --from ("": detected)."""
    shutil.rmtree(out, ignore_errors=True)
    result = subprocess.run([sys.executable, "-c", DRIVER, str(source), str(out), str(workers), form],
                            capture_output=True, text=True, check=True)
    samples, peak, anonymous, seconds = result.stdout.split()
    shutil.rmtree(out, ignore_errors=True)
    return int(samples), int(peak), int(anonymous), float(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-tars", action="store_true",
                        help="repack tiny samples from WebDataset tars (corgi pack --from wds)")
    parser.add_argument("--sizes", type=int, nargs="+", help="default: 50000 200000 500000 (tars: 100000 1000000)")
    parser.add_argument("--per-tar", type=int, default=10_000, help="samples per tar, with --from-tars")
    parser.add_argument("--workers", type=int, help="default: 2 (tars: 1)")
    parser.add_argument("--workdir", type=Path, help="default: bench/out/pack_memory (tars: bench/out/repack_memory)")
    parser.add_argument("--keep", action="store_true", help="keep the corpora for the next run")
    args = parser.parse_args()
    tars = args.from_tars
    sizes = args.sizes or ([100_000, 1_000_000] if tars else [50_000, 200_000, 500_000])
    workers = args.workers or (1 if tars else 2)
    workdir = args.workdir or Path("bench/out/repack_memory" if tars else "bench/out/pack_memory")
    name, unit = ("repack_memory", "sample") if tars else ("pack_memory", "file")
    what = (f"--from wds --workers {workers}, tiny samples (1-byte .txt + .cls) in tars of {args.per_tar:,}" if tars
            else f"--workers {workers}, 1 KB text files in {CLASSES} folders")
    print(f"# corgi pack {what}; driver peak RSS (VmHWM) and peak anonymous RSS (sampled); baseline: "
          f"{sizes[0]:,} {unit}s, same run")
    baseline = None
    for count in sizes:
        started = time.perf_counter()
        source = (make_tiny_tars(workdir / f"tars-{count}-{args.per_tar}", count, args.per_tar) if tars
                  else make_tiny_corpus(workdir / f"corpus-{count}", count))
        made = time.perf_counter() - started
        samples, peak, anonymous, seconds = driver_peak(source, workdir / "out", workers, "wds" if tars else "")
        assert samples == count, (samples, count)
        line = (f"{name} {count:>9,} {unit}s  peak RSS {peak / 2**20:6.1f} MiB  peak anonymous "
                f"{anonymous / 2**20:6.1f} MiB  pack {seconds:5.1f} s")
        if baseline is None:
            baseline = (count, peak, anonymous)
            print(f"{line}  (baseline; corpus written in {made:.0f} s)")
        else:
            growth, anonymous_growth = ((now - then) / (count - baseline[0])
                                        for now, then in ((peak, baseline[1]), (anonymous, baseline[2])))
            print(f"{line}  growth vs {baseline[0]:,} {unit}s: RSS {growth:5.1f} B/{unit}, anonymous "
                  f"{anonymous_growth:5.1f} B/{unit}; target <= {TARGET_BYTES_PER_FILE} B/{unit}: "
                  f"{_verdict(anonymous_growth)} (anonymous), {_verdict(growth)} (RSS)")
        if not args.keep:
            shutil.rmtree(source)
            for marker in source.parent.glob(f"{source.name}.complete-*"):  # or the next run would take it as made
                marker.unlink()


def _verdict(growth: float) -> str:
    return "met" if growth <= TARGET_BYTES_PER_FILE else "NOT met"


if __name__ == "__main__":
    main()

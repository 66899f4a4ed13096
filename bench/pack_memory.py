"""Driver memory of `corgi pack`: peak RSS of the packing process at 5x10^4, 2x10^5 and 5x10^5 tiny files.

Each pack runs in a fresh interpreter (`--workers 2` by default, so the driver only walks, plans,
hands out shard tasks and writes the manifest).  Two peaks of the driver alone (workers excluded):

* peak RSS - ru_maxrss, everything resident, including file pages the driver maps (its libraries,
  about 21 MiB whatever the corpus; reopening the manifest at the end of `pack()` adds 0.2 MiB);
* peak anonymous RSS - RssAnon, sampled every 10 ms: the driver's own memory (columns, plan, tasks).

The baseline is the smallest corpus, measured in the same run: the growth per file is
(peak at N - peak at the smallest N) / (N - smallest N).  Target: <= 64 B/file.

The corpora are 1 KB text files in 1,000 class folders, ImageNet-like names
(``n00000123/n00000123_000456.txt``), written with os.open/os.write (about 15 s for 5x10^5).

    python bench/pack_memory.py [--sizes 50000 200000 500000] [--workers 2] [--workdir bench/out/pack_memory]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TARGET_BYTES_PER_FILE = 64
CLASSES = 1000
PAYLOAD = (b"corgi pack tiny file " * 49)[:1000] + b"\n"
DRIVER = """
import resource, sys, threading, time
from corgi_io import PackOptions, pack

def anonymous():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon"))

peak = [anonymous()]
def sample():
    while True:
        peak[0] = max(peak[0], anonymous())
        time.sleep(0.01)

threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
manifest = pack(sys.argv[1], sys.argv[2], PackOptions(format="wds"), workers=int(sys.argv[3]), progress=False)
seconds = time.perf_counter() - start
print(manifest.num_samples, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, max(peak[0], anonymous()), seconds)
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


def driver_peak(source: Path, out: Path, workers: int) -> tuple:
    """(samples, driver peak RSS, driver peak anonymous RSS, seconds) of one pack in a fresh interpreter."""
    shutil.rmtree(out, ignore_errors=True)
    result = subprocess.run([sys.executable, "-c", DRIVER, str(source), str(out), str(workers)],
                            capture_output=True, text=True, check=True)
    samples, peak, anonymous, seconds = result.stdout.split()
    shutil.rmtree(out, ignore_errors=True)
    return int(samples), int(peak), int(anonymous), float(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000, 500_000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/pack_memory"))
    parser.add_argument("--keep", action="store_true", help="keep the corpora for the next run")
    args = parser.parse_args()
    print(f"# corgi pack --workers {args.workers}, 1 KB text files in {CLASSES} folders; driver peak RSS (ru_maxrss) "
          f"and peak anonymous RSS (sampled); baseline: {args.sizes[0]:,} files, same run")
    baseline = None
    for count in args.sizes:
        started = time.perf_counter()
        source = make_tiny_corpus(args.workdir / f"corpus-{count}", count)
        made = time.perf_counter() - started
        samples, peak, anonymous, seconds = driver_peak(source, args.workdir / "out", args.workers)
        assert samples == count, (samples, count)
        line = (f"pack_memory {count:>9,} files  peak RSS {peak / 2**20:6.1f} MiB  peak anonymous "
                f"{anonymous / 2**20:6.1f} MiB  pack {seconds:5.1f} s")
        if baseline is None:
            baseline = (count, peak, anonymous)
            print(f"{line}  (baseline; corpus written in {made:.0f} s)")
        else:
            growth, anonymous_growth = ((now - then) / (count - baseline[0])
                                        for now, then in ((peak, baseline[1]), (anonymous, baseline[2])))
            print(f"{line}  growth vs {baseline[0]:,} files: RSS {growth:5.1f} B/file, anonymous "
                  f"{anonymous_growth:5.1f} B/file; target <= {TARGET_BYTES_PER_FILE} B/file: "
                  f"{_verdict(anonymous_growth)} (anonymous), {_verdict(growth)} (RSS)")
        if not args.keep:
            shutil.rmtree(source)


def _verdict(growth: float) -> str:
    return "met" if growth <= TARGET_BYTES_PER_FILE else "NOT met"


if __name__ == "__main__":
    main()

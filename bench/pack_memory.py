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
includes one unit's record columns (at most 16,384 samples' worth in memory, the rest spilled beside the
record, freed when the unit is done: a constant); what grows with the corpus is the manifest, built
from the unit records a column at a time (packing/manifest_columns.py). Same target.

``--tree`` (issue 30): the whole process tree of ``corgi pack SOURCE OUT --workers 2`` as a held-out check
measures it, ``/usr/bin/time -f %M`` (default sizes 5x10^4 and 2.5x10^5).  %M is the child's ru_maxrss from
wait4: the high-water RSS of the largest single process among the command and the descendants it reaped
(the pool's workers), not a sum.  Beside it, each process's VmHWM, sampled from /proc every 20 ms while the
pack runs, says which process that is: the driver, or the largest worker.

    python bench/pack_memory.py [--sizes 50000 200000 500000] [--workers 2] [--workdir bench/out/pack_memory]
    python bench/pack_memory.py --tree [--sizes 50000 250000] [--workers 2]
    python bench/pack_memory.py --from-tars [--sizes 100000 1000000] [--per-tar 10000] [--workers 1]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import make_wds_tars  # noqa: E402

TARGET_BYTES_PER_FILE = 64
GNU_TIME = "/usr/bin/time"
CLI = "import sys; from corgi_io.cli import main; sys.argv[0] = 'corgi'; sys.exit(main())"  # the `corgi` script
SAMPLE_SECONDS = 0.02
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


def tree_peak(source: Path, out: Path, workers: int) -> tuple:
    """(%M of ``corgi pack SOURCE OUT --workers N`` under GNU time, the driver's VmHWM, the largest worker's VmHWM,
    seconds), bytes; the VmHWMs sampled (the last reading of each process before it ended)."""
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.NamedTemporaryFile("r") as report:
        command = [GNU_TIME, "-f", "%M", "-o", report.name, sys.executable, "-c", CLI,
                   "pack", str(source), str(out), "--workers", str(workers)]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        driver, workers_peak = _sample_tree(process)
        seconds = time.perf_counter() - started
        if process.wait() != 0:
            raise SystemExit(f"corgi pack failed: {process.stderr.read().strip()}")
        maxrss = int(report.read().split()[-1]) * 1024  # GNU time prints kilobytes
    shutil.rmtree(out, ignore_errors=True)
    return maxrss, driver, workers_peak, seconds


def _sample_tree(process: subprocess.Popen) -> tuple:
    """(driver VmHWM, largest worker VmHWM) of the pack under `process` (GNU time), read every SAMPLE_SECONDS until
    it ends.  VmHWM only grows, so each process's last reading is its peak up to then."""
    peaks = {}  # pid -> (parent pid, last VmHWM)
    while process.poll() is None:
        children = _children()
        for driver in children.get(process.pid, ()):
            for pid in (driver, *children.get(driver, ())):
                hwm = _vm_hwm(pid)
                if hwm is not None:
                    peaks[pid] = (driver if pid != driver else process.pid, hwm)
        time.sleep(SAMPLE_SECONDS)
    driver = max((hwm for parent, hwm in peaks.values() if parent == process.pid), default=0)
    worker = max((hwm for parent, hwm in peaks.values() if parent != process.pid), default=0)
    return driver, worker


def _children() -> dict:
    """{parent pid: [child pids]} of every process now running (from /proc/PID/stat)."""
    children = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    parent = int(stat.read().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):  # it ended meanwhile
                continue
            children.setdefault(parent, []).append(int(entry.name))
    return children


def _vm_hwm(pid: int):
    """The VmHWM of process `pid` in bytes, or None once it has ended."""
    try:
        with open(f"/proc/{pid}/status") as lines:
            return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("VmHWM:")), None)
    except OSError:
        return None


def main_tree(sizes: list, workers: int, workdir: Path, keep: bool) -> None:
    """Print the --tree lines: %M of the whole `corgi pack` tree, the driver's and the largest worker's VmHWM,
    and their growth per file against the smallest corpus."""
    print(f"# corgi pack --workers {workers}, 1 KB text files in {CLASSES} folders; whole tree: GNU time %M (the "
          f"largest process); VmHWM of the driver and of the largest worker (sampled); baseline: {sizes[0]:,} files")
    baseline = None
    for count in sizes:
        source = make_tiny_corpus(workdir / f"corpus-{count}", count)
        peaks = tree_peak(source, workdir / "out", workers)
        largest = "driver" if peaks[1] >= peaks[2] else "a worker"
        line = (f"pack_tree {count:>9,} files  %M {peaks[0] / 2**20:6.1f} MiB ({largest})  driver "
                f"{peaks[1] / 2**20:6.1f} MiB  worker {peaks[2] / 2**20:6.1f} MiB  pack {peaks[3]:5.1f} s")
        if baseline is None:
            baseline = count, peaks
            print(f"{line}  (baseline)")
        else:
            growth = [(now - then) / (count - baseline[0]) for now, then in zip(peaks[:3], baseline[1])]
            print(f"{line}  growth vs {baseline[0]:,} files: %M {growth[0]:5.1f} B/file (driver {growth[1]:5.1f}, "
                  f"worker {growth[2]:5.1f}); target <= {TARGET_BYTES_PER_FILE} B/file: {_verdict(growth[0])}")
        if not keep:
            _remove_corpus(source)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-tars", action="store_true",
                        help="repack tiny samples from WebDataset tars (corgi pack --from wds)")
    parser.add_argument("--tree", action="store_true",
                        help="GNU time %%M of the whole `corgi pack` process tree, workers included")
    parser.add_argument("--sizes", type=int, nargs="+",
                        help="default: 50000 200000 500000 (tars: 100000 1000000; tree: 50000 250000)")
    parser.add_argument("--per-tar", type=int, default=10_000, help="samples per tar, with --from-tars")
    parser.add_argument("--workers", type=int, help="default: 2 (tars: 1)")
    parser.add_argument("--workdir", type=Path, help="default: bench/out/pack_memory (tars: bench/out/repack_memory)")
    parser.add_argument("--keep", action="store_true", help="keep the corpora for the next run")
    args = parser.parse_args()
    if args.tree:
        return main_tree(args.sizes or [50_000, 250_000], args.workers or 2,
                         args.workdir or Path("bench/out/pack_memory"), args.keep)
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
            _remove_corpus(source)


def _remove_corpus(source: Path) -> None:
    """Delete a corpus and its markers (or the next run would take it as made)."""
    shutil.rmtree(source)
    for marker in source.parent.glob(f"{source.name}.complete-*"):
        marker.unlink()


def _verdict(growth: float) -> str:
    return "met" if growth <= TARGET_BYTES_PER_FILE else "NOT met"


if __name__ == "__main__":
    main()

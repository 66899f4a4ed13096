"""What per-field offsets cost (issue 33 §1): manifest bytes per sample and pack speed, before and after.

An image-caption corpus (N long-tailed JPEGs, each with a .txt caption of 8 to 30 words beside it: two fields a
sample, labeled by class folder) is packed by the code of --before (a git revision, exported with `git archive`
into the work folder) and by this working tree's, alternately, round after round, each pack in a fresh process
(warm page cache, --workers 1, corgi's default options).  A pack's time is its `pack()` call, measured in that
process (imports and start-up not counted); each line is the median of the rounds.  Manifest bytes are every
file of the pack that is not a shard: manifest.json and columns/ (the .npy columns and the row groups,
rows.bin and blocks.bin).

    python bench/field_offsets.py [--n 2000] [--rounds 5] [--widths lognormal|mixture] [--before c63fa72^]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from _corpus import WIDTHS, make_jpeg_corpus  # noqa: E402

WORDS = ("corgi", "on", "a", "beach", "with", "red", "ball", "running", "near", "the", "sea", "two", "dogs")
CHILD = """
import json, sys, time
from pathlib import Path
from corgi_io.packing import PackOptions, pack
source, out = sys.argv[1:3]
start = time.perf_counter()
pack(source, out, PackOptions(), workers=1, overwrite=True, progress=False)
seconds = time.perf_counter() - start
parts = {"head": 0, "npy": 0, "row groups": 0}
for path in Path(out).rglob("*"):
    if path.is_file() and path.parent.name == "columns":
        parts["row groups" if path.suffix == ".bin" else "npy"] += path.stat().st_size
    elif path.name == "manifest.json":
        parts["head"] += path.stat().st_size
samples = json.loads((Path(out) / "manifest.json").read_text())["counts"]["samples"]
print(json.dumps({"seconds": seconds, "samples": samples, **parts}))
"""


def captioned_corpus(root: Path, n: int, widths: str) -> Path:
    """`make_jpeg_corpus` with a caption beside each JPEG (reused when already there)."""
    make_jpeg_corpus(root, n, widths=widths)
    marker = root.with_name(root.name + f".captions-{n}")
    if not marker.exists():
        rng = np.random.default_rng(1)
        for image in sorted(root.glob("class_*/*.jpg")):
            words = rng.choice(WORDS, int(rng.integers(8, 31)))
            image.with_suffix(".txt").write_text(" ".join(words))
        marker.touch()
    return root


def export(revision: str, workdir: Path) -> Path:
    """A folder holding corgi_io as of `revision` (git archive), made once per revision."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", revision], capture_output=True, text=True,
                            check=True).stdout.strip()
    tree = workdir / f"before-{commit[:10]}"
    if not (tree / "corgi_io").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "corgi_io"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run(tree: Path, source: Path, out: Path) -> dict:
    """One pack of `source` by the corgi_io under `tree`, in a fresh process: its seconds and manifest bytes."""
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", CHILD, str(source), str(out)], capture_output=True, text=True,
                          env=env, cwd=tree, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="image-caption pairs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", default="c63fa72^", help="the revision without per-field offsets")
    parser.add_argument("--widths", choices=sorted(WIDTHS), default="lognormal",
                        help="the JPEGs' widths: lognormal (median 160 px) or mixture (90%% 64-256 px, 10%% to 1024)")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out" / "field_offsets")
    args = parser.parse_args()
    source = captioned_corpus(args.workdir / f"corpus-{args.widths}-{args.n}", args.n, args.widths)
    megabytes = sum(p.stat().st_size for p in source.rglob("*.*")) / 1e6
    trees = {"before": export(args.before, args.workdir), "after": REPO}
    results = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            results[name].append(run(tree, source, args.workdir / "out"))
    shutil.rmtree(args.workdir / "out", ignore_errors=True)
    report(args, megabytes, results)


def report(args, megabytes: float, results: dict) -> None:
    """One line per result, the after lines with their ratio against before."""
    samples = results["before"][0]["samples"]
    print(f"# {samples} image-caption samples (JPEG of {args.widths} widths + .txt), {megabytes:.1f} MB, corgi pack "
          f"--workers 1, median of {args.rounds} interleaved rounds, warm page cache; before = {args.before}, after = "
          "this tree")
    size = {name: {part: runs[0][part] / samples for part in ("npy", "row groups", "head")}
            for name, runs in results.items()}
    seconds = {name: statistics.median(run["seconds"] for run in runs) for name, runs in results.items()}
    for name in results:
        total = sum(size[name].values())
        ratio = "" if name == "before" else (f"  ratio {total / sum(size['before'].values()):.2f}x vs before "
                                             f"(+{total - sum(size['before'].values()):.1f} B/sample)")
        print(f"manifest {name:6s} {total:7.1f} B/sample (columns .npy {size[name]['npy']:.1f}, row groups "
              f"{size[name]['row groups']:.1f}, head {size[name]['head']:.1f}){ratio}")
    for name in results:
        ratio = "" if name == "before" else f"  ratio {seconds['before'] / seconds[name]:.3f}x the speed of before"
        print(f"pack     {name:6s} {samples / seconds[name]:7.0f} samples/s {megabytes / seconds[name]:6.1f} MB/s "
              f"({seconds[name]:.3f} s){ratio}")


if __name__ == "__main__":
    main()

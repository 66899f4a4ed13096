"""Loader throughput, bytes only, shuffle on: corgi-io against litdata, webdataset and Mosaic streaming.

The corpus is --n long-tailed JPEGs (90% at 64..256 px, 10% at 256..1024 px), packed once as wds
(blocks of --block-samples, 64 MB shards) and written by litdata (and Mosaic, where it imports)
in their own formats, all cached under --workdir.

    python bench/load.py [--n 20000] [--rounds 3] [--http | --blend]

First, the cost of checking every sample's checksum (Reading(verify=True), the default) against
not checking: whole epochs, warm cache, the two modes interleaved, median of --rounds rounds.

Then four lines, as issue 10 asks: one process and DataLoader(num_workers=2, batch_size=64,
collate = a list of samples), each with a warm page cache and with every file of the contender
evicted (POSIX_FADV_DONTNEED).  Each measurement runs in a fresh process (bench/_loaders.py);
rounds interleave the contenders (their order rotated), and every line gives the median
samples/s, corgi's ratio against each peer (median of the per-round ratios, with their range)
and the peak RSS.  corgi keeps its default buffer (16 blocks); webdataset's shuffle buffer holds
as many samples.  Peers are optional: `pip install --no-deps litdata lightning-utilities` (see
pyproject); one that does not import is reported with the reason.

--http serves the pack from nginx on 127.0.0.1 and compares corgipile with per-sample random
access ("full"), at the default settings and with explicit reads in flight.

--blend asks what reading a weighted blend of two local packs costs against one pack of the same
samples: the whole corpus packed as one pack ("single pack", the baseline) against its two halves
(alternate files, hard links) packed alike and read as CorgiPileDataset(Blend({"a": .., "b": ..},
weights 0.5/0.5, samples_per_epoch = --n)) ("blend of 2 packs").  Bytes only, corgipile shuffle,
warm page cache; one process and DataLoader(num_workers=2, batch_size=64, collate = a list of
samples).  Each measurement in a fresh process, rounds interleaved (order rotated), median of
--rounds; each blend line gives blend/single (median of per-round ratios, with their range) and
the cost, 1 - blend/single, against the target (<= 10%).

--batches (issue 20 §4) measures raw-bytes batches of --batch-size (256), warm page cache: in one process,
CorgiPileDataset(batching=Batches(256)) (its batches built from the read pieces with numpy) against the same through its
per-sample path (a collate_fn of its own that calls collate_samples) and against litdata's StreamingDataset per
sample; with DataLoader(ds, batch_size=None, num_workers=2) against litdata's StreamingDataLoader(num_workers=2,
batch_size=256).  Each measurement in a fresh process, contenders interleaved (order rotated), median of --rounds;
one line per contender, then each ratio against its baseline with its goal.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _corpus import corpus_files, drop_page_cache, make_jpeg_corpus  # noqa: E402


def rate(samples, seconds_budget: float):
    """(samples/s, MB/s) over an iterable of (payload bytes), stopping after `seconds_budget`."""
    count = nbytes = 0
    start = time.perf_counter()
    for data in samples:
        count += 1
        nbytes += len(data)
        if count % 256 == 0 and time.perf_counter() - start > seconds_budget:
            break
    elapsed = time.perf_counter() - start
    return count / elapsed, nbytes / 1e6 / elapsed


def corgi(root, shuffle, buffer_blocks, read_threads=None, verify=True):
    from corgi_io.loaders import CorgiPileDataset, Reading, Shuffle

    dataset = CorgiPileDataset(root, shuffle=Shuffle(shuffle, buffer_blocks), seed=0,
                               reading=Reading(threads=read_threads, verify=verify))
    return (sample["data"] for sample in dataset)


def epochs_rate(make, epochs: int) -> tuple:
    """(samples/s, MB/s) of `epochs` whole passes over fresh iterables of payloads from `make()`."""
    count = nbytes = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for data in make():
            count += 1
            nbytes += len(data)
    elapsed = time.perf_counter() - start
    return count / elapsed, nbytes / 1e6 / elapsed


def verify_cost(root, args, num_samples: int) -> None:
    """Checked against unchecked CorgiPile epochs, warm cache, interleaved, median of `args.rounds` rounds.

    Each measurement runs whole epochs for at least 2 s: a single epoch of a small pack takes
    a fraction of a second, where scheduling noise on a shared 2-core machine swamps a 10% effect.
    """
    modes = {"corgipile, checksums checked (default)": True, "corgipile, Reading(verify=False)": False}
    makers = {name: (lambda v=verify: corgi(root, "corgipile", args.buffer_blocks, verify=v))
              for name, verify in modes.items()}
    fastest = max(epochs_rate(make, 1)[0] for make in makers.values())  # also warms the cache
    epochs = max(1, math.ceil(2.0 * fastest / num_samples))
    runs = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, make in makers.items():
            runs[name].append(epochs_rate(make, epochs))
    medians = {name: tuple(statistics.median(r[i] for r in rounds) for i in (0, 1)) for name, rounds in runs.items()}
    report("warm", medians, "corgipile, Reading(verify=False)")
    checked, unchecked = (medians[name][0] for name in modes)
    ratios = sorted(c[0] / u[0] for c, u in zip(*runs.values()))
    print(f"# checking costs {100 * (1 - checked / unchecked):.1f}% of unchecked throughput (median of {args.rounds} "
          f"interleaved rounds of {epochs} epochs; per-round ratios {ratios[0]:.2f}..{ratios[-1]:.2f}; target <= 10%)")


LINES = (("warm", 0), ("cold", 0), ("warm", 2), ("cold", 2))  # (cache, DataLoader workers; 0: one process)


def peer_line_name(cache: str, workers: int) -> str:
    return f"{cache}, " + ("one process" if not workers else f"DataLoader {workers} workers, batch 64")


def write_litdata(corpus: Path, out: Path) -> Path | None:
    """litdata's own chunks of the same JPEGs (BinaryWriter, 64 MB chunks), cached under `out`; None without litdata."""
    try:
        from litdata.streaming.writer import BinaryWriter
    except ImportError as exc:
        print(f"# litdata: not installed ({exc}); pip install --no-deps litdata lightning-utilities")
        return None
    if not (out / "index.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        writer = BinaryWriter(str(out), chunk_bytes="64MB")
        for i, (path, label) in enumerate(corpus_files(corpus)):
            writer.add_item(i, {"data": Path(path).read_bytes(), "label": label})
        writer.done()
        writer.merge()
    return out


def write_mosaic(corpus: Path, out: Path) -> Path | None:
    """Mosaic streaming's MDS shards of the same JPEGs, cached under `out`; None (and why) when it does not import."""
    why = subprocess.run([sys.executable, "-c", "import streaming"], capture_output=True, text=True).stderr
    if why:
        print(f"# mosaic streaming: cannot import ({why.strip().splitlines()[-1]})")
        return None
    from streaming import MDSWriter

    if not (out / "index.json").exists():
        with MDSWriter(out=str(out), columns={"data": "bytes", "label": "int"}, size_limit="64mb") as writer:
            for path, label in corpus_files(corpus):
                writer.write({"data": Path(path).read_bytes(), "label": label})
    return out


def measure_once(contender: str, root: Path, cache: str, workers: int, args, extra=()) -> dict:
    """One measurement in a fresh process (bench/_loaders.py); the root's files evicted first when cold."""
    if cache == "cold":
        drop_page_cache(p for p in root.rglob("*") if p.is_file())
    command = [sys.executable, str(HERE / "_loaders.py"), contender, str(root), "--workers", str(workers),
               "--seconds", str(args.seconds), "--buffer-blocks", str(args.buffer_blocks),
               "--shuffle-samples", str(args.shuffle_samples), *extra] + (["--cold"] if cache == "cold" else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleaved_rounds(lines, contenders: dict, args) -> dict:
    """{(line, name): [measurement per round]} of `contenders` (name -> (contender, root, extra arguments)) on
    each (cache, workers) line, interleaved and their order rotated each round."""
    runs, names = {}, list(contenders)
    for round_ in range(args.rounds):
        for cache, workers in lines:
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                contender, root, extra = contenders[name]
                runs.setdefault((peer_line_name(cache, workers), name), []).append(
                    measure_once(contender, root, cache, workers, args, extra))
    return runs


def line_text(prefix: str, name: str, got: list, baseline: list, workers: int, width: int = 11) -> str | None:
    """'prefix name samples/s MB/s peak RSS' of one contender's runs, or None (after printing why) when a run of
    it or of its `baseline` failed."""
    failed = [r["error"] for r in got + baseline if "error" in r]
    if failed:
        print(f"{prefix} {name:{width}s} failed: {failed[0]}")
        return None
    rss = max(r["rss_mb"] for r in got) + (max(r["worker_rss_mb"] for r in got) if workers else 0)
    return (f"{prefix} {name:{width}s} {statistics.median(r['samples_s'] for r in got):8.0f} samples/s "
            f"{statistics.median(r['mb_s'] for r in got):7.1f} MB/s  peak RSS {rss:6.0f} MB")


def report_peers(runs: dict, names: list, rounds: int) -> None:
    """Per line and contender: median samples/s, peak RSS, and corgi's ratio against it (median of per-round ratios)."""
    for cache, workers in LINES:
        line = peer_line_name(cache, workers)
        corgi_runs = runs[(line, "corgi")]
        for name in names:
            got = runs[(line, name)]
            text = line_text(f"load {line:40s}", name, got, corgi_runs, workers)
            if text is None:
                continue
            if name != "corgi":
                ratios = sorted(c["samples_s"] / r["samples_s"] for c, r in zip(corgi_runs, got))
                text += f"  corgi/{name} {statistics.median(ratios):5.2f}x ({ratios[0]:.2f}..{ratios[-1]:.2f})"
            print(text)
    print(f"# median of {rounds} interleaved rounds, each measurement in a fresh process; peak RSS: the process's "
          "(with workers: plus the largest worker's), the most over the rounds")


def pack_wds(corpus: Path, out: Path, block_samples: int) -> Path:
    from corgi_io import PackOptions, pack

    if not (out / "manifest.json").exists():
        pack(corpus, out, PackOptions(format="wds", block_samples=block_samples, shard_bytes=64 << 20),
             workers=2, progress=False, overwrite=True)
    return out


def split_corpus(corpus: Path, out: Path, parts: int = 2) -> list:
    """The corpus's files dealt in turn into `parts` folders `out/<a, b, ...>/class_k/` (hard links, copies
    across devices), reused if already there; returns the folders."""
    folders = [out / chr(ord("a") + k) for k in range(parts)]
    marker = out.with_name(out.name + f".complete-{parts}")  # beside the halves, not in them
    if marker.exists():
        return folders
    shutil.rmtree(out, ignore_errors=True)
    for i, (path, _) in enumerate(corpus_files(corpus)):
        target = folders[i % parts] / Path(path).parent.name / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
    marker.touch()
    return folders


BLEND_LINES = (("warm", 0), ("warm", 2))  # (cache, DataLoader workers; 0: one process)
BLEND_CONTENDERS = {"single pack": "corgi", "blend of 2 packs": "corgi-blend"}


def run_blend(corpus: Path, single: Path, args, num_samples: int) -> None:
    """Single pack against the blend of its two halves' packs (0.5/0.5, an epoch of as many samples),
    each measurement in a fresh process, contenders interleaved and their order rotated each round."""
    halves = split_corpus(corpus, args.workdir / f"halves-{args.n}")
    blend = args.workdir / f"packs-{args.n}" / "blend"  # one pack per subfolder: the blend's sources
    for half in halves:
        pack_wds(half, blend / half.name, args.block_samples)
    roots = {"single pack": single, "blend of 2 packs": blend}
    extra = {"single pack": (), "blend of 2 packs": ("--samples-per-epoch", str(num_samples))}
    print("# blend: warm page cache only (every file read once before each measurement); "
          f"halves {' + '.join(str(open_num_samples(blend / h.name)) for h in halves)} samples, "
          f"samples_per_epoch {num_samples}")
    runs = interleaved_rounds(BLEND_LINES, {name: (BLEND_CONTENDERS[name], roots[name], extra[name]) for name in roots},
                              args)
    for cache, workers in BLEND_LINES:
        line = peer_line_name(cache, workers)
        base = runs[(line, "single pack")]
        for name in roots:
            got = runs[(line, name)]
            text = line_text(f"load blend {line:36s}", name, got, base, workers, width=16)
            if text is not None and name != "single pack":
                ratios = sorted(r["samples_s"] / b["samples_s"] for r, b in zip(got, base))
                ratio = statistics.median(ratios)
                text += (f"  blend/single {ratio:5.2f}x ({ratios[0]:.2f}..{ratios[-1]:.2f})  "
                         f"cost {100 * (1 - ratio):4.1f}% (target <= 10%)")
            if text is not None:
                print(text)
    print(f"# median of {args.rounds} interleaved rounds, each measurement in a fresh process of at least "
          f"{args.seconds:g} s of whole epochs after one warm-up epoch; ratios: median (range) of the per-round ratios")


BATCH_LINES = {  # (cache, DataLoader workers) -> {contender's name: bench/_loaders.py contender}; the first: the baseline
    ("warm", 0): {"corgi per-sample batches": "corgi-per-sample", "corgi batches": "corgi",
                  "litdata per sample": "litdata"},
    ("warm", 2): {"litdata StreamingDataLoader": "litdata", "corgi batches": "corgi"},
}
BATCH_GOALS = (  # (line, contender, baseline, goal of contender/baseline)
    (("warm", 0), "corgi batches", "corgi per-sample batches", 3.0),
    (("warm", 0), "corgi batches", "litdata per sample", 1.5),
    (("warm", 2), "corgi batches", "litdata StreamingDataLoader", 1.5),
)


def run_batches(root: Path, litdata_root: Path | None, args) -> None:
    """Raw-bytes batches of --batch-size (issue 20 §4): corgi's batches against its per-sample path and litdata,
    each measurement in a fresh process, contenders interleaved (order rotated), median of --rounds."""
    roots = {"corgi": root, "corgi-per-sample": root, "litdata": litdata_root}
    extra = ("--batch-size", str(args.batch_size))
    runs = {}
    for round_ in range(args.rounds):
        for (cache, workers), contenders in BATCH_LINES.items():
            names = [name for name, contender in contenders.items() if roots[contender] is not None]
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                contender = contenders[name]
                runs.setdefault(((cache, workers), name), []).append(
                    measure_once(contender, roots[contender], cache, workers, args, extra))
    for (line, name), got in runs.items():
        text = line_text(f"load batches {peer_line_name(*line).replace('batch 64', f'batch {args.batch_size}'):34s}",
                         name, got, got, line[1], width=27)
        if text is not None:
            print(text)
    for line, name, baseline, goal in BATCH_GOALS:
        got, base = runs.get((line, name)), runs.get((line, baseline))
        if got and base and not any("error" in r for r in got + base):
            ratios = sorted(r["samples_s"] / b["samples_s"] for r, b in zip(got, base))
            ratio = statistics.median(ratios)
            print(f"load batches {peer_line_name(*line).split(',')[1].strip():26s} {name} / {baseline}: "
                  f"{ratio:5.2f}x ({ratios[0]:.2f}..{ratios[-1]:.2f})  goal >= {goal:g}x "
                  f"{'met' if ratio >= goal else 'MISSED'}")
    print(f"# bytes only, batches of {args.batch_size}, warm page cache; median of {args.rounds} interleaved rounds, "
          "each measurement in a fresh process; ratios: median (range) of the per-round ratios")


def open_num_samples(root: Path) -> int:
    from corgi_io.manifest import open_manifest

    return open_manifest(root).num_samples


def report(cache: str, results: dict, baseline: str) -> None:
    for name, (samples_s, mb_s) in results.items():
        print(f"load {cache:5s} {name:44s} {samples_s:9.0f} samples/s {mb_s:8.1f} MB/s "
              f"ratio {samples_s / results[baseline][0]:6.2f}x vs {baseline}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--block-samples", type=int, default=1024, help="pack default; blocks also stop at 4 MiB")
    parser.add_argument("--buffer-blocks", type=int, default=16, help="corgi's shuffle buffer (the dataset default)")
    parser.add_argument("--seconds", type=float, default=2.0, help="warm measurements: whole epochs for this long")
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--blend", action="store_true", help="single pack against a 0.5/0.5 blend of its two halves")
    parser.add_argument("--batches", action="store_true", help="raw-bytes batches: corgi's against its per-sample "
                        "path and litdata's")
    parser.add_argument("--batch-size", type=int, default=256, help="--batches: samples per batch")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; lines give the median")
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "load")
    args = parser.parse_args()
    corpus = make_jpeg_corpus(args.workdir / f"corpus-{args.n}", args.n, widths="mixture")
    root = pack_wds(corpus, args.workdir / f"packs-{args.n}" / "wds", args.block_samples)
    from corgi_io.manifest import open_manifest

    manifest = open_manifest(root)
    args.shuffle_samples = int(args.buffer_blocks * manifest.blocks.count.mean())
    print(f"# {manifest.num_samples} JPEGs, {manifest.samples.bytes.sum() / 1e6:.0f} MB, {len(manifest.blocks)} blocks "
          f"of {args.block_samples}; buffer {args.buffer_blocks} blocks = {args.shuffle_samples} samples "
          f"(webdataset's shuffle buffer holds as many)")
    if args.http:
        run_http(root, args, manifest)
        return
    if args.blend:
        run_blend(corpus, root, args, manifest.num_samples)
        return
    if args.batches:
        run_batches(root, write_litdata(corpus, args.workdir / f"litdata-{args.n}"), args)
        return
    verify_cost(root, args, manifest.num_samples)
    roots = {"corgi": root, "litdata": write_litdata(corpus, args.workdir / f"litdata-{args.n}"),
             "webdataset": root, "mosaic": write_mosaic(corpus, args.workdir / f"mosaic-{args.n}")}
    roots = {name: path for name, path in roots.items() if path is not None}
    runs = interleaved_rounds(LINES, {name: (name, root, ()) for name, root in roots.items()}, args)
    report_peers(runs, list(roots), args.rounds)


def http_rate(url: str, shuffle: str, read_threads, seconds: float) -> tuple:
    """((samples/s, MB/s), reads in flight at the end) of one CorgiPileDataset over HTTP."""
    from corgi_io.loaders import CorgiPileDataset, Reading, Shuffle

    dataset = CorgiPileDataset(url, shuffle=Shuffle(shuffle), seed=0, reading=Reading(threads=read_threads))
    result = rate((sample["data"] for sample in dataset), seconds)
    return result, dataset.last_reader.in_flight.limit


def run_http(root: Path, args, manifest) -> None:
    """corgipile against per-sample random access ("full") through nginx on loopback: the defaults
    (reads in flight grown while they pay), then fixed counts; each pair interleaved, median of --rounds."""
    from helpers.http_server import NginxServer

    with NginxServer(args.workdir / "www") as server:
        served = args.workdir / "www" / "ds"
        shutil.rmtree(served, ignore_errors=True)
        shutil.copytree(root, served)
        url = f"{server.url}/ds"
        for threads in (None, 1, 4):
            label = "defaults" if threads is None else f"{threads} read{'s' * (threads > 1)} in flight"
            runs = {"corgipile": [], "full": []}
            for _ in range(args.rounds):  # interleaved
                for mode, got in runs.items():
                    got.append(http_rate(url, mode, threads, args.seconds))
            results = {f"{mode} over HTTP, {label}": tuple(statistics.median(r[0][i] for r in got) for i in (0, 1))
                       for mode, got in runs.items()}
            report("http", results, f"full over HTTP, {label}")
            if threads is None:
                print("# reads in flight the defaults settled on: " +
                      ", ".join(f"{mode} {sorted(r[1] for r in got)}" for mode, got in runs.items()))


if __name__ == "__main__":
    main()

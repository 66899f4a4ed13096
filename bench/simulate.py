"""`corgi plan --simulate` against measured runs on this machine (issue 32 §3): a local pack, a remote pack behind a
latency proxy, and the remote pack through a cache of half its bytes.

The corpus: --n photo-like JPEGs (--long-side px, 4:3, landscape and portrait in turn), packed once under
--workdir in blocks of --block-samples.  Every run reads it as training would, with
CorgiPileDataset(decode=ImageDecoder(size=--size), batching=Batches(64), reading=Reading(threads=--threads))
through DataLoader(batch_size=None, num_workers=--workers), timed from iter(loader) to its last batch:

  local    the pack on local disk (warm page cache), one epoch;
  remote   over HTTP: nginx on 127.0.0.1 behind tests/helpers/latency_proxy.py (+--delay-ms before each answer's
           first byte, --rate bytes/s shared by every connection), one epoch;
  cached   the same through Cache(folder, limit=half the pack's shard bytes), a new folder each round, two epochs.

    python bench/simulate.py [--n 3000] [--long-side 400] [--block-samples 32] [--workers 2] [--threads 2]
                             [--delay-ms 50] [--rate 25e6] [--rounds 3]

The model's inputs are measured apart at the start of each round, never fitted to a run: the decode cost per
sample is the ImageDecoder alone on --decode-samples samples of the pack, decoded by --workers processes at once
(this machine is shared: they meet the same neighbours as the workers), the best of 3 passes; the CPU per byte is
the reading thread's work alone (ranged read from the page cache, verify, split) on as many blocks; the start is
DataLoader(--workers) over the same dataset whose workers yield one item at once, reading nothing; bandwidth and
latency are the proxy's settings, reads in flight --threads.  The prediction is `corgi plan --simulate`'s
(`report.plan.price_run`).  Measured remote bytes are the reading processes' `Storage.bytes_read` (every ranged
read of a piece, the cache's prefetch of the next epoch included) and the hit rate their `PieceCache.hits` over
the pieces they read: each DataLoader worker hands its counters over after its last batch (`Counted`).

One line per (case, epoch, figure): the measured median of --rounds interleaved rounds, the prediction, their
ratio with the measurement as the baseline, and the goal (within 25%).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _corpus import make_imagenet_folder  # noqa: E402
from _timing import best_of  # noqa: E402

BATCH, GOAL = 64, 0.25


class Counted(torch.utils.data.IterableDataset):
    """A CorgiPileDataset whose every reading process, after its last batch, yields {"counters": ...}: its remote
    bytes (`Storage.bytes_read`), cache hits and pieces read this epoch (the cache's prefetch waited for)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        ds = self.dataset
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        before = ds.storage.bytes_read
        yield from ds
        cache = ds.last_reader.cache
        if cache is not None:
            cache.wait_warm()
        yield {"counters": {"remote": ds.storage.bytes_read - before, "hits": cache.hits if cache else 0,
                            "reads": len(ds.worker_pieces(worker, workers))}}


def dataset(root: str, args, cache=None):
    from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder, Reading

    return CorgiPileDataset(root, seed=0, decode=ImageDecoder(size=args.size), batching=Batches(BATCH),
                            reading=Reading(threads=args.threads), cache=cache)


def run_epochs(root: str, args, epochs: int, cache=None) -> list:
    """Per epoch {"seconds", "remote", "hits", "reads"} of one loader over `root`, each epoch's workers new."""
    from torch.utils.data import DataLoader

    counted = Counted(dataset(root, args, cache))
    loader = DataLoader(counted, batch_size=None, num_workers=args.workers)
    out = []
    for epoch in range(epochs):
        counted.dataset.set_epoch(epoch)
        counters, start = [], time.perf_counter()
        last = start
        for item in loader:
            if "counters" in item:
                counters.append(item["counters"])
            else:
                last = time.perf_counter()
        out.append({"seconds": last - start, **{k: sum(c[k] for c in counters) for k in ("remote", "hits", "reads")}})
    return out


# --- the model's inputs, measured apart ---

def decode_seconds(root: Path, args) -> float:
    """Seconds per sample of the ImageDecoder alone, on the first --decode-samples samples of an epoch, decoded by
    --workers processes at once (as the workers will: on a shared machine they share its cores with the rest)."""
    import multiprocessing

    from corgi_io.loaders import CorgiPileDataset, ImageDecoder

    samples = []
    for sample in CorgiPileDataset(str(root), seed=1, decode=None):
        samples.append({"data": sample["data"], "index": sample["index"]})
        if len(samples) == args.decode_samples:
            break
    global _DECODING
    _DECODING = (ImageDecoder(size=args.size).for_epoch(1, 0), samples)  # the forked processes inherit it
    workers = max(1, args.workers)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_decode_all, [8] * workers)  # warm-up
        return best_of(lambda: pool.map(_decode_all, [len(samples)] * workers), 3) / len(samples)


_DECODING = None  # (decoder, samples) of `decode_seconds`, set before its processes fork


def _decode_all(count: int) -> None:
    decoder, samples = _DECODING
    for sample in samples[:count]:
        decoder(sample["data"], sample)


def byte_seconds(root: Path, blocks: int) -> float:
    """CPU seconds per byte of the reading thread's work alone: a block's ranged read (page cache), its checksum
    and its split into samples, over the first `blocks` blocks."""
    from corgi_io.manifest import open_manifest
    from corgi_io.reading.read_checks import PieceVerifier
    from corgi_io.reading.split import PieceSplitter
    from corgi_io.storage import open_storage

    m = open_manifest(str(root))
    storage, b = open_storage(m.root), m.blocks
    verifier, splitter = PieceVerifier(m, storage), PieceSplitter(m)
    pieces = [(k, int(b.first[k]), int(b.first[k] + b.count[k])) for k in range(min(blocks, len(b.count)))]

    def work():
        for piece in pieces:
            data = storage.read_range(m.shards[int(b.shard[piece[0]])].path, int(b.offset[piece[0]]),
                                      int(b.length[piece[0]]))
            verifier.check_piece(piece, data)
            splitter.split(piece, data)

    return best_of(work, 3) / sum(int(b.length[k]) for k, _, _ in pieces)


def start_seconds(root: Path, args) -> float:
    """Seconds from iter(DataLoader) until each of its --workers worker processes has given an item, with this
    bench's dataset in them, none read (`Started`): the start of a worker per epoch."""
    from torch.utils.data import DataLoader

    loader = DataLoader(Started(dataset(str(root), args)), batch_size=None, num_workers=args.workers)
    return best_of(lambda: list(loader), 3)


class Started(torch.utils.data.IterableDataset):
    """A dataset whose reading process yields one item at once, reading nothing."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        yield 0


def measure_costs(root: Path, args) -> dict:
    """{"decode": s per sample, "byte": s per byte, "start": s}, each measured alone (`decode_seconds`,
    `byte_seconds`, `start_seconds`)."""
    return {"decode": decode_seconds(root, args), "start": start_seconds(root, args) if args.workers else 0.0,
            "byte": byte_seconds(root, max(1, args.decode_samples // args.block_samples))}


# --- predictions and lines ---

def predict(m, args, costs: dict, epochs: int, **link) -> list:
    """`price_run`'s epochs for this bench's loader on a machine of `costs` and `link`."""
    from corgi_io.report.plan import price_run
    from corgi_io.schedule.run_model import RunModel

    model = RunModel(in_flight=args.threads, decode=costs["decode"], decode_per_byte=costs["byte"],
                     start=costs["start"], **link)
    return price_run(m.blocks, m.samples, model, world_size=1, workers=args.workers, batch_size=BATCH,
                     epochs=epochs)["epochs"]


def line(case: str, epoch: int, figure: str, measured: float, predicted: float, unit: str) -> str:
    """One result: measured, predicted, predicted / measured, the goal."""
    scale, fmt = {"s": (1.0, "7.2f"), "MB": (1e-6, "7.1f"), "": (1.0, "7.3f")}[unit]
    head = (f"simulate {case:7s} epoch {epoch}  {figure:12s} measured {measured * scale:{fmt}} {unit:2s}  "
            f"predicted {predicted * scale:{fmt}} {unit:2s}")
    if measured == 0:
        return f"{head}  (both 0: met)" if predicted == 0 else f"{head}  (measured 0: MISSED)"
    ratio = predicted / measured
    return f"{head}  {ratio:5.2f}x of measured  goal within {GOAL:.0%}: {'met' if abs(ratio - 1) <= GOAL else 'MISSED'}"


def report(case: str, runs: list, guesses: list) -> None:
    """The lines of one case (per round: its measured epochs, its predicted epochs): wall time, and remote bytes and
    hit rate where it reads over HTTP; medians over the rounds."""
    for epoch in range(len(runs[0])):
        def median(key, rounds):
            return statistics.median(each[epoch][key] for each in rounds)

        print(line(case, epoch, "wall time", median("seconds", runs), median("wall_time", guesses), "s"))
        if case != "local":
            print(line(case, epoch, "remote bytes", median("remote", runs), median("remote_bytes", guesses), "MB"))
        if guesses[0][epoch]["hit_rate"] is not None:
            measured = statistics.median(each[epoch]["hits"] / each[epoch]["reads"] for each in runs)
            print(line(case, epoch, "hit rate", measured, median("hit_rate", guesses), ""))


def prepare(args) -> Path:
    """The corpus packed once under --workdir (reused while its manifest is there)."""
    from corgi_io import PackOptions, pack

    corpus = make_imagenet_folder(args.workdir / f"corpus-{args.n}-{args.long_side}", args.n,
                                  long_side=args.long_side, grain=12, quality=90)
    root = args.workdir / f"pack-{args.n}-{args.long_side}-{args.block_samples}"
    if not (root / "manifest.json").exists():
        pack(corpus, root, PackOptions(block_samples=args.block_samples), workers=2, progress=False, overwrite=True)
    return root


def bench(args) -> None:
    from corgi_io.manifest import open_manifest

    root = prepare(args)
    m = open_manifest(str(root))
    limit = sum(shard.bytes for shard in m.shards) // 2
    print(f"# {m.num_samples} JPEGs ({args.long_side} px), {len(m.blocks)} blocks, pack {2 * limit / 1e6:.1f} MB; "
          f"ImageDecoder({args.size}), batches of {BATCH}, {args.workers} workers, {args.threads} reads in flight, "
          f"{os.cpu_count()} cores; remote: +{args.delay_ms:g} ms, {args.rate / 1e6:g} MB/s; "
          f"cache {limit / 1e6:.1f} MB (0.5x); median of {args.rounds} interleaved rounds, the model's costs "
          f"measured apart in each", flush=True)
    runs, guesses, costs = interleaved(args, root, m, limit)
    decode, read, start = (", ".join(f"{c[key] * scale:.3f}" for c in costs)
                           for key, scale in (("decode", 1e3), ("byte", 1e9), ("start", 1e3)))
    print(f"# measured apart, per round: decode {decode} ms per sample ({args.workers} processes at once), "
          f"reading {read} ns per byte, worker start {start} ms")
    for case in runs:
        report(case, runs[case], guesses[case])


def interleaved(args, root: Path, m, limit: int) -> tuple:
    """({case: per round its epochs measured}, {case: per round its epochs predicted}, [per round the costs]): each
    round measures the model's costs, then runs local, remote and cached in turn."""
    from corgi_io.loaders import Cache
    from helpers.http_server import NginxServer
    from helpers.latency_proxy import LatencyProxy

    link = {"bandwidth": args.rate, "latency": args.delay_ms / 1000}
    runs, guesses, costs = {"local": [], "remote": [], "cached": []}, {"local": [], "remote": [], "cached": []}, []
    with contextlib.ExitStack() as stack:
        www = args.workdir / "www"
        shutil.rmtree(www, ignore_errors=True)
        shutil.copytree(root, www / "ds")
        nginx = stack.enter_context(NginxServer(www))
        url = f"{stack.enter_context(LatencyProxy(nginx.port, args.delay_ms / 1000, args.rate)).url}/ds"
        caches = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.workdir)))
        for round_ in range(args.rounds):
            costs.append(measure_costs(root, args))
            guesses["local"].append(predict(m, args, costs[-1], 1))
            guesses["remote"].append(predict(m, args, costs[-1], 1, **link))
            guesses["cached"].append(predict(m, args, costs[-1], 2, cache_bytes=limit, **link))
            runs["local"].append(run_epochs(str(root), args, 1))
            runs["remote"].append(run_epochs(url, args, 1))
            runs["cached"].append(run_epochs(url, args, 2, Cache(caches / f"round-{round_}", limit)))
    return runs, guesses, costs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--long-side", type=int, default=400)
    parser.add_argument("--block-samples", type=int, default=32)
    parser.add_argument("--size", type=int, default=160, help="ImageDecoder's output side")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="Reading(threads=): reads in flight per worker")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--rate", type=float, default=25e6, help="the proxy's bandwidth, bytes/s")
    parser.add_argument("--decode-samples", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "simulate")
    bench(parser.parse_args())


if __name__ == "__main__":
    main()

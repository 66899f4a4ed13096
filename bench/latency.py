"""Latency hidden? First-epoch throughput from HTTP and S3 at 0 ms and +30 ms per request (issue 31 item 2).

The corpus is --n photo-like JPEGs (300x225 and 225x300, about 22 KB: 4,000 make 88 MB), written once
under --workdir as a corgi pack (default layout: 4 MiB blocks), as webdataset tars of 400 samples and
as litdata chunks (bench/load.py's writer).  nginx serves the corgi pack and the tars on 127.0.0.1,
moto's S3 server holds the corgi pack and the litdata chunks; in front of each server run two latency
proxies (tests/helpers/latency_proxy.py): one adding nothing, one adding --delay-ms before the first
byte of every answer, both capped at --rate bytes/s when given.  Every reader goes through a proxy.

    python bench/latency.py [--n 4000] [--rounds 3] [--delay-ms 30] [--rate BYTES_PER_S] [--workers 0,2]

Readers, bytes only (decode=None), shuffle on, one first epoch each in a fresh process with a cold
state (no cache, litdata's cache folder new and empty), timed from the dataset's construction (the
manifest or index fetch counts) to the epoch's last sample:
  corgi http    CorgiPileDataset(http://proxy/corgi)           corgi s3  CorgiPileDataset(s3://bench/corgi)
  litdata s3    litdata.StreamingDataset(s3://bench/litdata)    webdataset http  wds.WebDataset(tar URLs)
in one process and through DataLoader(num_workers=2, batch_size=64, a list collate).  Rounds interleave
every (delay, workers, reader), readers rotated; each line gives the median samples/s, the median
requests the reader made (counted at its proxy: HEADs and GETs), and its ratios: corgi against the best
peer in the same (delay, workers) (goal >= 1.5x at the delay), corgi at the delay against its own 0 ms
(goal >= 0.8x), corgi s3 against corgi http at 0 ms (goal >= 0.8x).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _corpus import corpus_files, make_imagenet_folder  # noqa: E402

READERS = ("corgi http", "corgi s3", "litdata s3", "webdataset http")
PEERS = ("litdata s3", "webdataset http")
BUCKET, TAR_SAMPLES = "bench", 400
GOAL_PEER, GOAL_SELF, GOAL_S3 = 1.5, 0.8, 0.8


# --- one measurement, in a fresh process (`latency.py --measure READER ROOT_URL --workers W [--endpoint URL]`) ---

def open_reader(reader: str, root: str, endpoint: str | None):
    """(dataset, the payload's field) of `reader` over `root` (an http URL, or s3:// through `endpoint`)."""
    if reader.startswith("corgi"):
        from corgi_io.loaders import CorgiPileDataset, Reading

        options = {"endpoint_url": endpoint} if root.startswith("s3://") else {}
        return CorgiPileDataset(root, seed=0, decode=None, reading=Reading(storage_options=options)), "data"
    if reader == "litdata s3":
        from litdata import StreamingDataset

        return StreamingDataset(root, cache_dir=tempfile.mkdtemp(prefix="litdata-cold-"), shuffle=True, seed=0,
                                storage_options={"endpoint_url": endpoint}), "data"
    import webdataset as wds

    urls = json.loads(root)
    return wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(16 * TAR_SAMPLES), "jpg"


def measure(reader: str, root: str, workers: int, endpoint: str | None) -> dict:
    """{samples, seconds, samples_s} of one cold first epoch, the dataset's construction included."""
    from _loaders import payloads

    __import__("corgi_io.loaders" if reader.startswith("corgi") else reader.split()[0])  # not timed: no I/O
    start = time.perf_counter()
    dataset, field = open_reader(reader, root, endpoint)
    samples = sum(1 for _ in payloads(dataset, field, workers))
    seconds = time.perf_counter() - start
    return {"samples": samples, "seconds": seconds, "samples_s": samples / seconds}


# --- the data, the servers and the proxies ---

def write_data(args) -> dict:
    """{kind: folder} of the corpus as a corgi pack, webdataset tars and litdata chunks, reused when there."""
    from corgi_io import pack
    from load import write_litdata

    base = args.workdir / f"n{args.n}"
    corpus = make_imagenet_folder(base / "corpus", args.n, long_side=300, grain=12, quality=90)
    corgi = base / "corgi"
    if not (corgi / "manifest.json").exists():
        pack(corpus, corgi, workers=2, progress=False, overwrite=True)
    return {"corgi": corgi, "wds": write_tars(corpus, base / "wds"),
            "litdata": write_litdata(corpus, base / "litdata")}


def write_tars(corpus: Path, out: Path) -> Path:
    """The corpus as webdataset tars of TAR_SAMPLES samples each (jpg, cls), reused when complete."""
    import webdataset as wds

    marker = out.with_name(out.name + ".complete")
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        files = corpus_files(corpus)
        for k in range(0, len(files), TAR_SAMPLES):
            with wds.TarWriter(str(out / f"shard-{k // TAR_SAMPLES:06d}.tar")) as tar:
                for i, (path, label) in enumerate(files[k:k + TAR_SAMPLES], start=k):
                    tar.write({"__key__": f"{i:07d}", "jpg": Path(path).read_bytes(), "cls": label})
        marker.touch()
    return out


def upload(endpoint: str, folders: dict) -> None:
    """Each {prefix: folder} into s3://BUCKET/prefix/ on the S3 server at `endpoint`."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    for prefix, folder in folders.items():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(folder)}")


def roots(reader: str, base: str, tars: list) -> str:
    """The root argument of `reader` behind the proxy at `base` (tars: a JSON list of URLs)."""
    if reader == "corgi http":
        return f"{base}/corgi"
    if reader == "webdataset http":
        return json.dumps([f"{base}/wds/{name}" for name in tars])
    return f"s3://{BUCKET}/{reader.split()[0]}"


# --- rounds and lines ---

def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its children (nginx's worker) so far."""
    import psutil

    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def run_one(reader: str, delay: float, workers: int, setup: dict) -> dict:
    """One measurement in a fresh process through the proxy of (reader's server, delay); the requests it made and
    the server's CPU seconds added."""
    server = "s3" if reader.endswith("s3") else "http"
    proxy, pid = setup["proxies"][(server, delay)], setup["pids"][server]
    proxy.requests()  # zero the count
    command = [sys.executable, __file__, "--measure", reader, roots(reader, proxy.url, setup["tars"]), "--workers",
               str(workers), "--endpoint", proxy.url]
    before = cpu_seconds(pid)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "requests": proxy.requests(),
            "server_cpu": cpu_seconds(pid) - before}


def interleaved(args, setup: dict) -> dict:
    """{(delay, workers, reader): [measurement per round]}, the readers of --readers rotated each round."""
    runs, readers = {}, args.readers
    for round_ in range(args.rounds):
        order = readers[round_ % len(readers):] + readers[:round_ % len(readers)]
        for delay in (0.0, args.delay_ms / 1000):
            for workers in args.workers:
                for reader in order:
                    runs.setdefault((delay, workers, reader), []).append(run_one(reader, delay, workers, setup))
    return runs


def median_rate(got: list) -> float | None:
    return None if any("error" in r for r in got) else statistics.median(r["samples_s"] for r in got)


def ratio(got: float, baseline: float | None, name: str, goal: float | None = None) -> str:
    if baseline is None:
        return ""
    met = "" if goal is None else f" (goal >= {goal}x: {'met' if got / baseline >= goal else 'MISSED'})"
    return f"  {got / baseline:5.2f}x vs {name}{met}"


def line(runs: dict, key: tuple) -> str:
    """One reader's line: median samples/s and requests, and its ratios against the named baselines."""
    delay, workers, reader = key
    mode = "one process" if not workers else f"DataLoader {workers} workers"
    head = f"latency {round(delay * 1000):3d} ms  {mode:20s} {reader:16s}"
    got = runs[key]
    rate = median_rate(got)
    if rate is None:
        return f"{head} failed: {next(r['error'] for r in got if 'error' in r)}"
    text = (f"{head} {rate:7.0f} samples/s  {statistics.median(r['requests'] for r in got):4.0f} requests  "
            f"server CPU {statistics.median(r['server_cpu'] for r in got):5.2f} s")
    if not reader.startswith("corgi"):
        return text
    peers = {peer: median_rate(runs[(delay, workers, peer)]) for peer in PEERS if (delay, workers, peer) in runs}
    best = max((p for p in peers if peers[p] is not None), key=peers.get, default=None)
    if best is not None:
        text += ratio(rate, peers[best], f"best peer ({best})", GOAL_PEER if delay else None)
    if delay:
        text += ratio(rate, median_rate(runs[(0.0, workers, reader)]), f"{reader} at 0 ms", GOAL_SELF)
    elif reader == "corgi s3" and (0.0, workers, "corgi http") in runs:
        text += ratio(rate, median_rate(runs[(0.0, workers, "corgi http")]), "corgi http at 0 ms", GOAL_S3)
    return text


def bench(args) -> None:
    from helpers.http_server import NginxServer
    from helpers.latency_proxy import LatencyProxy
    from helpers.s3_server import DUMMY_CREDENTIALS, MotoServer

    data = write_data(args)
    www = args.workdir / "www"
    shutil.rmtree(www, ignore_errors=True)
    for kind in ("corgi", "wds"):
        shutil.copytree(data[kind], www / kind)
    tars = sorted(p.name for p in data["wds"].glob("*.tar"))
    os.environ.update(DUMMY_CREDENTIALS)  # for the measured processes too
    with contextlib.ExitStack() as stack:
        nginx = stack.enter_context(NginxServer(www))
        moto = MotoServer().start()
        stack.callback(moto.stop)
        upload(moto.url, {kind: data[kind] for kind in ("corgi", "litdata") if data[kind] is not None})
        proxies = {(server, delay): stack.enter_context(LatencyProxy(port, delay, args.rate))
                   for server, port in (("http", nginx.port), ("s3", moto.port)) for delay in (0.0, args.delay_ms / 1000)}
        print(f"# {args.n} JPEGs, {sum(p.stat().st_size for p in data['corgi'].rglob('*.tar')) / 1e6:.1f} MB; "
              f"+{args.delay_ms} ms per request, rate {args.rate or 'unlimited'}; median of {args.rounds} interleaved "
              f"rounds, each a fresh process, cold first epoch", flush=True)
        runs = interleaved(args, {"proxies": proxies, "tars": tars, "pids": {"http": nginx._proc.pid, "s3": moto._proc.pid}})
    for key in runs:
        print(line(runs, key))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay-ms", type=int, default=30)
    parser.add_argument("--rate", type=float, default=None, help="bandwidth cap of each proxy, bytes/s")
    parser.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")], default=[0, 2])
    parser.add_argument("--readers", type=lambda s: [r.strip() for r in s.split(",")], default=list(READERS),
                        help="a comma-separated subset of: " + ", ".join(READERS))
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "latency")
    parser.add_argument("--measure", nargs=2, metavar=("READER", "ROOT"), help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.workers[0], args.endpoint)))
        return
    bench(args)


if __name__ == "__main__":
    main()

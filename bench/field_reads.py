"""Field-only reads (issue 33 §2): one epoch of an image-caption pack, every field against captions only.

The corpus is --n photo-like JPEGs (400x300 and 300x400, heavy grain: about 110 KB each) with a caption of 8 to
30 words beside each (bench/field_offsets.py's words), packed once under --workdir with corgi's defaults (4 MiB
blocks, manifest version 6).  One epoch is read by `CorgiPileDataset` (bytes only, CorgiPile shuffle, checks
on, one process) from the pack's folder, over HTTP from nginx on 127.0.0.1 (tests/helpers/http_server.py), and
from the same nginx through a link of --rate bytes/s (+ --delay-ms before each answer's first byte:
tests/helpers/latency_proxy.py, a process of its own; default 125 MB/s, a 1 Gb/s link, no delay), with every field (`Reading()`) and with the captions only (`Reading(fields=("txt",))`), timed from the dataset's
construction (the manifest's opening counts) to the epoch's last sample, warm page cache.  Rounds interleave
every (where, fields); each line gives the medians: wall seconds, the bytes the pack's storage read
(`Storage.bytes_read`: ranges asked for), its reads (requests), over HTTP also the bytes nginx sent for the
shards (multipart framing included), and for captions only the ratios against every field: bytes (goal
<= 5%) and speed (goal >= 10x over HTTP).

    python bench/field_reads.py [--n 2000] [--rounds 5] [--rate 125e6] [--delay-ms 0]
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _corpus import photo_jpeg  # noqa: E402
from field_offsets import WORDS  # noqa: E402

BYTES_GOAL, SPEED_GOAL = 0.05, 10.0
READS = {"all fields": None, "txt only": ("txt",)}


def write_corpus(root: Path, n: int) -> Path:
    """`n` JPEGs of about 110 KB, each with a .txt caption, in 10 class folders (reused when already there)."""
    marker = root.with_name(root.name + ".complete")
    if marker.exists():
        return root
    rng = np.random.default_rng(0)
    for i in range(n):
        stem = root / f"class_{i % 10}" / f"img_{i:06d}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        size = (400, 300) if i % 2 == 0 else (300, 400)
        stem.with_suffix(".jpg").write_bytes(photo_jpeg(rng, *size, grain=60, quality=95))
        stem.with_suffix(".txt").write_text(" ".join(rng.choice(WORDS, int(rng.integers(8, 31)))))
    marker.touch()
    return root


def make_pack(corpus: Path, out: Path) -> Path:
    """The corpus packed with corgi's defaults (made once)."""
    from corgi_io.packing import PackOptions, pack

    if not (out / "manifest.json").exists():
        pack(corpus, out, PackOptions(), workers=1, overwrite=True, progress=False)
    return out


def epoch(root: str, fields, server=None) -> dict:
    """One epoch of the pack at `root` read with `fields`: its seconds, storage bytes and reads, samples, and the
    shard bytes `server` (an NginxServer) sent meanwhile."""
    from corgi_io.loaders import CorgiPileDataset, Reading

    before = len(server.requests()) if server else 0
    start = time.perf_counter()
    dataset = CorgiPileDataset(root, seed=0, reading=Reading(fields=fields))
    samples = sum(1 for _ in dataset)
    seconds = time.perf_counter() - start
    sent = sum(n for _, path, _, n in server.requests()[before:] if path.endswith(".tar")) if server else None
    storage = dataset.storage
    return {"seconds": seconds, "bytes": storage.bytes_read, "reads": storage.reads, "samples": samples,
            "sent": sent}


def line(where: str, name: str, runs: list, full: list | None) -> str:
    """One printed result: the medians of `runs`, with ratios against `full` (the every-field runs)."""
    med = {key: statistics.median(run[key] for run in runs) for key in ("seconds", "bytes", "reads")}
    text = (f"{where:10s} {name:10s} {med['seconds']:7.3f} s  {runs[0]['samples'] / med['seconds']:9.0f} samples/s  "
            f"read {med['bytes'] / 1e6:8.2f} MB in {med['reads']:5.0f} reads")
    if runs[0]["sent"] is not None:
        text += f"  (nginx sent {statistics.median(run['sent'] for run in runs) / 1e6:.2f} MB)"
    if full is not None:
        share = med["bytes"] / statistics.median(run["bytes"] for run in full)
        speed = statistics.median(run["seconds"] for run in full) / med["seconds"]
        text += (f"  ratio vs all fields: bytes {share:.2%} (goal <= {BYTES_GOAL:.0%}: "
                 f"{'met' if share <= BYTES_GOAL else 'MISSED'}), speed {speed:.1f}x")
        if where != "local":
            text += f" (goal >= {SPEED_GOAL:.0f}x: {'met' if speed >= SPEED_GOAL else 'MISSED'})"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="image-caption pairs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=125e6, help="the link's bytes/s")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="the link's wait before each answer")
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "field_reads")
    args = parser.parse_args()
    from helpers.http_server import NginxServer
    from helpers.latency_proxy import LatencyProxy

    corpus = write_corpus(args.workdir / f"corpus-{args.n}", args.n)
    pack = make_pack(corpus, args.workdir / f"pack-{args.n}")
    www = args.workdir / "www"
    shutil.rmtree(www, ignore_errors=True)
    www.mkdir(parents=True)
    (www / "pack").symlink_to(pack.resolve())
    link = f"http {args.rate * 8 / 1e9:g}Gb/s" + (f" +{args.delay_ms:g}ms" if args.delay_ms else "")
    runs = {(where, name): [] for where in ("local", "http", link) for name in READS}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(NginxServer(www))
        proxy = stack.enter_context(LatencyProxy(server.port, args.delay_ms / 1000, args.rate))
        roots = {"local": (str(pack), None), "http": (server.url + "pack", server),
                 link: (proxy.url + "/pack", server)}
        for _ in range(args.rounds):
            for (where, name), got in runs.items():
                got.append(epoch(*roots[where][:1], READS[name], roots[where][1]))
    shards = sum(p.stat().st_size for p in pack.glob("*.tar"))
    print(f"# {args.n} image-caption samples (JPEG ~110 KB + .txt of 8-30 words), shards {shards / 1e6:.1f} MB; one "
          f"epoch, bytes only, one process, checks on; median of {args.rounds} interleaved rounds, warm page cache; "
          f"http = nginx on 127.0.0.1, {link} = the same through a proxy of that bandwidth")
    for (where, name), got in runs.items():
        print(line(where, name, got, None if READS[name] is None else runs[(where, "all fields")]))


if __name__ == "__main__":
    main()

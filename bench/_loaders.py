"""One loader measurement in its own process: `python bench/_loaders.py CONTENDER MODE ROOT [options]`.

bench/load.py runs every measurement through this script, so that each contender starts from a
fresh interpreter (no page cache state or allocator state carried over from another contender)
and its peak RSS is its own.  It prints one JSON line: samples/s, MB/s, samples, and the peak
RSS in MB of the process (with `--workers`, also the largest DataLoader worker's).

Contenders, bytes only, shuffle on:
  corgi       CorgiPileDataset(ROOT), checksums checked (the default); with --batch-size B its batches
  corgi-per-sample CorgiPileDataset(ROOT, batching=Batches(B)) through its per-sample path (a collate_fn of its own that
              calls collate_samples), the batches of before issue 20 §4 (bench/load.py --batches)
  corgi-blend CorgiPileDataset(Blend({name: pack})) over the packs in ROOT's subfolders, equal weights,
              --samples-per-epoch samples an epoch (bench/load.py --blend)
  litdata     litdata.StreamingDataset(ROOT, shuffle=True) over chunks litdata wrote itself
  webdataset  wds.WebDataset(tars).shuffle(buffer samples)
  mosaic      streaming.StreamingDataset(local=ROOT, shuffle=True) over MDS shards

Peers are optional bench extras, installed without their dependencies (see pyproject's `bench`
note): an ImportError is reported as {"error": ...} and the line says why.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path


def corgi(root: str, args):
    from corgi_io.loaders import Batches, CorgiPileDataset, Shuffle

    batching = None if args.batch_size is None else Batches(args.batch_size)
    return CorgiPileDataset(root, shuffle=Shuffle(buffer_blocks=args.buffer_blocks), seed=0, batching=batching), "data"


def corgi_blend(root: str, args):
    from corgi_io.loaders import Blend, CorgiPileDataset, Shuffle

    sources = {p.name: str(p) for p in sorted(Path(root).iterdir()) if (p / "manifest.json").exists()}
    blend = Blend(sources, weights={name: 1 / len(sources) for name in sources},
                  samples_per_epoch=args.samples_per_epoch)
    return CorgiPileDataset(blend, shuffle=Shuffle(buffer_blocks=args.buffer_blocks), seed=0), "data"


def litdata(root: str, args):
    from litdata import StreamingDataset

    return StreamingDataset(root, shuffle=True, seed=0), "data"


def webdataset(root: str, args):
    import webdataset as wds

    urls = sorted(str(p) for p in Path(root).glob("shard-*.tar"))
    return wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(args.shuffle_samples), "jpg"


def mosaic(root: str, args):
    from streaming import StreamingDataset

    return StreamingDataset(local=root, shuffle=True, shuffle_seed=0, batch_size=64), "data"


def corgi_per_sample(root: str, args):
    from corgi_io.loaders import Batches, CorgiPileDataset, Shuffle

    return CorgiPileDataset(root, shuffle=Shuffle(buffer_blocks=args.buffer_blocks), seed=0,
                            batching=Batches(args.batch_size, collate_fn=per_sample_collate)), "data"


def per_sample_collate(samples: list):
    """`collate_samples` behind a collate_fn of its own: the dataset batches through its per-sample path."""
    from corgi_io.loaders.collate import collate_samples

    return collate_samples(samples)


CONTENDERS = {"corgi": corgi, "corgi-per-sample": corgi_per_sample, "corgi-blend": corgi_blend, "litdata": litdata,
              "webdataset": webdataset, "mosaic": mosaic}


def as_list(batch: list) -> list:
    """The trivial collate: the batch as a list of samples.  A memoryview payload (litdata,
    Mosaic) cannot be pickled onto the worker queue, so it becomes bytes here, in the worker."""
    return [dict(s, data=bytes(s["data"])) if isinstance(s.get("data"), memoryview) else s for s in batch]


def payloads(dataset, field: str, workers: int):
    """The payloads of one epoch, in the process (workers=0) or through DataLoader(num_workers, batch_size=64)."""
    if not workers:
        return (sample[field] for sample in dataset)
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=64, num_workers=workers, collate_fn=as_list)
    return (sample[field] for batch in loader for sample in batch)


def batch_counts(dataset, field: str, workers: int, batch_size: int, corgi: bool):
    """(samples, bytes) of each batch of one epoch (--batch-size).  In one process corgi's dataset yields its batches
    and litdata's its samples (its per-sample rate, counted per sample); with workers, corgi goes through
    DataLoader(batch_size=None) and litdata through StreamingDataLoader(batch_size)."""
    if corgi:
        from torch.utils.data import DataLoader

        batches = dataset if not workers else DataLoader(dataset, batch_size=None, num_workers=workers)
        return ((len(batch[field]), len(batch[field].buffer)) for batch in batches)
    if not workers:
        return ((1, len(sample[field])) for sample in dataset)
    from litdata import StreamingDataLoader

    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
    return ((len(batch[field]), sum(map(len, batch[field]))) for batch in loader)


def measure(make, seconds: float, epochs: int | None, sized: bool = False) -> tuple:
    """(samples, bytes, seconds) of whole epochs: `epochs` of them, or as many as fit in `seconds`; `make()` gives
    payloads, or with `sized` (samples, bytes) per batch."""
    count = nbytes = done = 0
    start = time.perf_counter()
    while True:
        for data in make():
            if sized:
                count, nbytes = count + data[0], nbytes + data[1]
                continue
            count += 1
            nbytes += len(data)
        done += 1
        elapsed = time.perf_counter() - start
        if (epochs is not None and done >= epochs) or (epochs is None and elapsed >= seconds):
            return count, nbytes, elapsed


def peak_rss_mb() -> dict:
    """VmHWM of this process and the largest ru_maxrss of its finished children (DataLoader workers), in MB.

    Not this process's ru_maxrss: Linux keeps it across fork and exec, so it would start at the bench
    driver's RSS.  VmHWM belongs to the address space, which exec makes new."""
    with open("/proc/self/status") as status:
        own = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"rss_mb": round(own, 1), "worker_rss_mb": round(children, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("contender", choices=sorted(CONTENDERS))
    parser.add_argument("root")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--cold", action="store_true", help="one epoch, no warm-up (the caller evicted the files)")
    parser.add_argument("--seconds", type=float, default=2.0, help="warm: whole epochs for at least this long")
    parser.add_argument("--buffer-blocks", type=int, default=16)
    parser.add_argument("--shuffle-samples", type=int, default=16384)
    parser.add_argument("--batch-size", type=int, default=None, help="corgi: batches of this size (bench/load.py "
                        "--batches); litdata: its StreamingDataLoader's, with --workers")
    parser.add_argument("--samples-per-epoch", type=int, default=None, help="corgi-blend: default all the packs' samples")
    args = parser.parse_args()
    try:
        dataset, field = CONTENDERS[args.contender](args.root, args)
    except ImportError as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    sized = args.batch_size is not None
    make = (lambda: batch_counts(dataset, field, args.workers, args.batch_size,
                                                   args.contender.startswith("corgi"))) if sized else \
        (lambda: payloads(dataset, field, args.workers))
    if not args.cold:
        measure(make, 0, 1, sized)  # warm the page cache and the contender's own state
    count, nbytes, elapsed = measure(make, args.seconds, 1 if args.cold else None, sized)
    print(json.dumps({"samples_s": count / elapsed, "mb_s": nbytes / 1e6 / elapsed, "samples": count,
                      **peak_rss_mb()}))


if __name__ == "__main__":
    sys.exit(main())

"""What the per-stage timing (`Reading(timing="stages")`, the default) costs: samples/s with it against without it.

Issue 32 §1: the timing is on by default only if it costs at most 2% of samples/s in bench/load.py's loads and the
image bench.  The same loads, each run with ``Reading(timing="off")`` (the baseline) and ``"stages"``, in one
process, --epochs whole epochs a measurement, warm page cache, the two interleaved (their order alternating, an
even number of rounds, so that neither gains from going first), median of --rounds rounds;
each line gives the median samples/s of both and the median of the per-round ratios with their range, then the
same for this process's CPU seconds per sample (its threads' included; the DataLoader line's workers are other
processes, not counted), which other processes' load disturbs less than wall time:

* ``samples``: bench/load.py's corpus (--n long-tailed JPEGs), bytes only, one sample at a time: the worst case,
  each sample's hand-over timed (two `perf_counter` calls) against about 5 µs of work;
* ``list of 64, 2 workers``: the same through DataLoader(batch_size=64, num_workers=2, collate_fn=list), as
  bench/load.py's second line;
* ``Batches(256)``: raw-bytes batches built from the pieces (per piece and batch, nothing per sample);
* ``images``: ImageNet-sized JPEGs (--images of 500x375) decoded by ImageDecoder(224) into Batches(64), as
  bench/image_decode.py's imagenet set, in one process;
* ``noise floor``: ``samples`` with timing off against itself, measured the same way: how far apart two equal
  loads land on this machine, to read the other ratios against.

    python bench/stage_timing.py [--n 20000] [--images 1500] [--rounds 8] [--epochs 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _corpus import make_imagenet_folder, make_jpeg_corpus  # noqa: E402
from load import pack_wds  # noqa: E402


def loads(root: Path, images: Path) -> dict:
    """{name: make(timing) -> (an iterable of items, samples in an item or None to count len(item))}."""
    import torch

    from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder, Reading

    def dataset(pack, timing, **options):
        return CorgiPileDataset(str(pack), seed=0, reading=Reading(timing=timing), **options)

    return {
        "samples": lambda timing: (dataset(root, timing), 1),
        "list of 64, 2 workers": lambda timing: (torch.utils.data.DataLoader(
            dataset(root, timing), batch_size=64, num_workers=2, collate_fn=list), None),
        "Batches(256)": lambda timing: (dataset(root, timing, batching=Batches(256)), None),
        "images": lambda timing: (dataset(images, timing, batching=Batches(64), decode=ImageDecoder(224)), None),
    }


def epochs_rate(items, per_item, epochs: int) -> tuple:
    """(samples/s, this process's CPU seconds per sample, its threads' included) of `epochs` passes over `items`
    (a dataset or a loader)."""
    count, start, cpu = 0, time.perf_counter(), time.process_time()
    for epoch in range(epochs):
        getattr(getattr(items, "dataset", items), "set_epoch")(epoch)
        for item in items:
            count += per_item or len(item["data"] if isinstance(item, dict) else item)
    return count / (time.perf_counter() - start), (time.process_time() - cpu) / count


def measure(make, rounds: int, epochs: int, timings=("off", "stages")) -> tuple:
    """(median baseline samples/s, median measured samples/s, per-round ratios of samples/s, per-round ratios of
    CPU per sample) of `rounds` interleaved rounds of `make(timing)` for the two `timings` (baseline first)."""
    runs = {0: [], 1: []}
    for r in range(rounds + rounds % 2):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            runs[which].append(epochs_rate(*make(timings[which]), epochs))
    rates = {"off": [rate for rate, _ in runs[0]], "stages": [rate for rate, _ in runs[1]]}
    cpu = [on / off for (_, on), (_, off) in zip(runs[1], runs[0])]
    ratios = [on / off for on, off in zip(rates["stages"], rates["off"])]
    return statistics.median(rates["off"]), statistics.median(rates["stages"]), ratios, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "stage_timing")
    args = parser.parse_args()
    root = pack_wds(make_jpeg_corpus(args.workdir / "corpus", args.n), args.workdir / f"pack-{args.n}", 256)
    images = pack_wds(make_imagenet_folder(args.workdir / "imagenet", args.images), args.workdir / "images", 64)
    print(f"timing cost: samples/s with Reading(timing='stages') against timing='off', one process unless said, "
          f"warm cache, {args.epochs} epochs a measurement, median of {args.rounds + args.rounds % 2} interleaved "
          "rounds")
    made = loads(root, images)
    for name, make, timings in [*((name, make, ("off", "stages")) for name, make in made.items()),
                                ("noise floor", made["samples"], ("off", "off"))]:
        off, on, ratios, cpu = measure(make, args.rounds, args.epochs, timings)
        cost = 1 - statistics.median(ratios)
        print(f"stage timing  {name:<22} {on:>9,.0f} samples/s  {statistics.median(ratios):.3f}x timing off "
              f"({off:,.0f}; rounds {min(ratios):.3f}..{max(ratios):.3f})  cost {cost:+.1%} (goal <= 2%);  "
              f"CPU a sample {statistics.median(cpu):.3f}x ({min(cpu):.3f}..{max(cpu):.3f})", flush=True)


if __name__ == "__main__":
    main()

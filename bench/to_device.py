"""Host-to-device copies and decodes that overlap compute: a small model's step with `to_device` against the work
done inside the step.

    python bench/to_device.py [--batch 256] [--steps 50] [--rounds 3] [--workers 4] [--images PACK]

Batches of --batch uint8 images (3 x 224 x 224, about 38 MB) come from a DataLoader with pinned memory; a
small CNN trains on them.  Baseline: each step copies its batch (`.to(device, non_blocking=True)`) on the
compute stream, then computes.  Contender: `corgi_io.loaders.to_device`, which copies batch k + 1 on a side
stream while the model computes on batch k.

With --images PACK (a corgi pack of JPEGs with labels, such as bench/image_decode.py's imagenet/corgi), the same
model trains on the pack's images, RandomResizedCrop(224) + flip, epoch after epoch until --steps, three ways:
the baseline `ImageDecoder()` decodes in the DataLoader workers and `to_device` copies the batches; with
`ImageDecoder(device="cuda")` the workers send the JPEG bytes and nvJPEG decodes them either in the step
(`batch["data"].decode()`, on the compute stream) or in `to_device`, on its side stream, one batch ahead.

Rounds interleave the contenders.  Each line gives the mean step time (a round's median) and its ratio to the baseline's, the
GPU idle time per step and the GPU time of the work done in the step (CUDA events on the compute stream).  GPU
idle is the time from the end of one step's model work to the start of the next: a copy or a decode done in
the step, the wait for to_device's side stream, and the host's time to hand the next batch out.  Without CUDA
there is nothing to measure: the script says so and exits 0.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

CROP = 224


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((3, CROP, CROP), i % 251, dtype=torch.uint8), i % 10


class Steps:
    """Whole epochs of `loader` until `steps` batches have passed (a pack holds fewer batches than a run takes)."""

    def __init__(self, loader, steps: int):
        self.loader, self.steps = loader, steps

    def __iter__(self):
        done = 0
        while done < self.steps:
            for batch in self.loader:
                done += 1
                yield batch


def model_and_optimizer(device):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 5, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(64 * 16, 10)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def step(model, optimizer, images, labels) -> None:
    loss = torch.nn.functional.cross_entropy(model(images.float() / 255), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def tensor_contenders(args, device) -> dict:
    """{name: (batches, prepare)}, the baseline first: synthetic batches copied in the step or by `to_device`;
    `prepare` turns a batch into (images, labels) on the device, inside the step."""
    from corgi_io.loaders import to_device

    loader = torch.utils.data.DataLoader(Images(args.batch * args.steps), batch_size=args.batch,
                                         num_workers=args.workers, pin_memory=True, persistent_workers=True)
    return {"copy in the step": (loader, lambda batch: [t.to(device, non_blocking=True) for t in batch]),
            "to_device": (to_device(loader, device), lambda batch: batch)}


def image_contenders(args, device) -> dict:
    """{name: (batches, prepare)}, the baseline first: the pack's crops decoded on the CPU in the workers and copied by
    `to_device`, or left encoded and decoded with nvJPEG in the step or by `to_device`; as `tensor_contenders`."""
    from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder, to_device

    def loader(decode_on: str) -> Steps:
        decode = ImageDecoder(CROP, device=decode_on)
        dataset = CorgiPileDataset(args.images, batching=Batches(args.batch), seed=0, decode=decode)
        return Steps(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=args.workers, pin_memory=True,
                                                 persistent_workers=True), args.steps)

    def decoded(batch) -> tuple:
        return batch["data"].permute(0, 3, 1, 2), batch["label"]

    def decoded_in_step(batch) -> tuple:
        return batch["data"].decode(device).permute(0, 3, 1, 2), batch["label"].to(device, non_blocking=True)

    return {"ImageDecoder() + to_device": (to_device(loader("cpu"), device), decoded),
            "nvJPEG in the step": (loader(str(device)), decoded_in_step),
            "nvJPEG in to_device": (to_device(loader(str(device)), device), decoded)}


def run(batches, prepare, device) -> tuple:
    """(mean seconds per step, mean GPU idle ms per step, mean GPU ms of `prepare` in the step), the first two steps
    left out.  Means, not medians: workers that decode on the CPU hand out most of a small pack's epoch at once, so
    the median step hides the wait at each epoch's start (an H200 run of 2026-11-27 showed 2.54 ms/step median for a
    loader that makes about 5,000 images/s, 13 ms per batch of 64)."""
    model, optimizer = model_and_optimizer(device)
    times, marks = [], []  # per step, events on the compute stream: (before prepare, model start, model end)
    torch.cuda.synchronize(device)
    last = time.perf_counter()
    for batch in batches:
        before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        before.record()
        images, labels = prepare(batch)
        start.record()
        step(model, optimizer, images, labels)
        end.record()
        torch.cuda.synchronize(device)
        now = time.perf_counter()
        times.append(now - last)
        last = now
        marks.append((before, start, end))
    idle = [marks[k][2].elapsed_time(marks[k + 1][1]) for k in range(len(marks) - 1)]
    in_step = [before.elapsed_time(start) for before, start, _ in marks]
    return statistics.fmean(times[2:]), statistics.fmean(idle[2:]), statistics.fmean(in_step[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--images", help="a corgi pack of JPEGs: decode its images (see above)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("# to_device: no CUDA device here, nothing to measure (on CPU to_device is a pass-through)")
        return
    device = torch.device("cuda")
    contenders = image_contenders(args, device) if args.images else tensor_contenders(args, device)
    results = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, (batches, prepare) in contenders.items():
            results[name].append(run(batches, prepare, device))
    what = (f"{args.images}: RandomResizedCrop({CROP}) + flip, batch {args.batch}, {args.workers} workers"
            if args.images else f"batch {args.batch} x 3 x {CROP} x {CROP} uint8")
    print(f"# {torch.cuda.get_device_name(device)}; {what}, {args.steps} steps, mean per step, median of "
          f"{args.rounds} interleaved rounds; GPU idle: the compute stream's time between one step's model work and the next's")
    baseline = next(iter(results))
    base = statistics.median(r[0] for r in results[baseline])
    for name, got in results.items():
        seconds, idle, in_step = (statistics.median(r[i] for r in got) for i in range(3))
        print(f"to_device {name:26s} {1000 * seconds:8.2f} ms/step  ratio {seconds / base:5.2f}x vs {baseline}  "
              f"GPU idle {idle:6.2f} ms/step ({idle / (1000 * seconds):4.0%})  in the step {in_step:6.2f} ms")


if __name__ == "__main__":
    main()

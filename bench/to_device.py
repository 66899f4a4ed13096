"""Host-to-device copies that overlap compute: a small model's step with `to_device` against the copy inside the step.

    python bench/to_device.py [--batch 256] [--steps 50] [--rounds 3]

Batches of --batch uint8 images (3 x 224 x 224, about 38 MB) come from a DataLoader with pinned memory; a
small CNN trains on them.  Baseline: each step copies its batch (`.to(device, non_blocking=True)`) on the
compute stream, then computes.  Contender: `corgi_io.loaders.to_device`, which copies batch k + 1 on a side
stream while the model computes on batch k.  Rounds interleave the two; each line gives the median step time,
the GPU time per step spent on nothing but the copy in the baseline (CUDA events around it), and the ratio.
Without CUDA there is nothing to measure: the script says so and exits 0.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((3, 224, 224), i % 251, dtype=torch.uint8), i % 10


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


def run(loader, device, wrapped: bool) -> tuple:
    """(median seconds per step, median copy milliseconds per step on the compute stream: 0 when wrapped)."""
    from corgi_io.loaders import to_device

    model, optimizer = model_and_optimizer(device)
    times, copies = [], []
    batches = to_device(loader, device) if wrapped else loader
    torch.cuda.synchronize(device)
    last = time.perf_counter()
    for images, labels in batches:
        if not wrapped:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            end.record()
            copies.append((start, end))
        step(model, optimizer, images, labels)
        torch.cuda.synchronize(device)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    copy_ms = statistics.median(s.elapsed_time(e) for s, e in copies) if copies else 0.0
    return statistics.median(times[2:]), copy_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("# to_device: no CUDA device here, nothing to measure (on CPU to_device is a pass-through)")
        return
    device = torch.device("cuda")
    loader = torch.utils.data.DataLoader(Images(args.batch * args.steps), batch_size=args.batch,
                                         num_workers=args.workers, pin_memory=True, persistent_workers=True)
    results = {"copy in the step": [], "to_device": []}
    for _ in range(args.rounds):
        for name in results:
            results[name].append(run(loader, device, name == "to_device"))
    base = statistics.median(r[0] for r in results["copy in the step"])
    copy_ms = statistics.median(r[1] for r in results["copy in the step"])
    print(f"# {torch.cuda.get_device_name(device)}; batch {args.batch} x 3 x 224 x 224 uint8, {args.steps} steps, "
          f"median of {args.rounds} interleaved rounds; the baseline's copy takes {copy_ms:.2f} ms of GPU time a step")
    for name, got in results.items():
        seconds = statistics.median(r[0] for r in got)
        print(f"to_device {name:18s} {1000 * seconds:8.2f} ms/step  ratio {seconds / base:5.2f}x vs copy in the step")


if __name__ == "__main__":
    main()

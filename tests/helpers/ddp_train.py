"""Launched by tests/e2e/test_torchrun.py under `torchrun --nproc_per_node=2`: a tiny DDP model on CPU (gloo).

Each rank trains for --epochs over a CorgiPileDataset in batch mode (the dataset yields collated
batches of --batch-size; the DataLoader's batch_size is None) and writes its len(loader) and, per
epoch, its step count and the keys it saw to OUT/rank<r>.json, so the test can check that the
steps are len(loader) on every rank, and coverage.
With --stop-after N every rank stops after N steps of the first epoch and saves its
StatefulDataLoader state to OUT/state-rank<r>.json (a preemption); with --resume-from FILE
every rank loads that one saved state (elastic: the world size may differ) and finishes the epoch.
"""
import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io.loaders import Batches, CorgiPileDataset, Ranks, Shuffle


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset")
    parser.add_argument("out", type=Path)
    parser.add_argument("--balance", default="size")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--stop-after", type=int, help="save the loader state after this many steps and stop")
    parser.add_argument("--resume-from", type=Path, help="a loader state saved by one rank of an earlier run")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    dataset = CorgiPileDataset(args.dataset, shuffle=Shuffle(buffer_blocks=2), ranks=Ranks(balance=args.balance),
                               batching=Batches(args.batch_size))
    if args.resume_from:
        dataset.load_state_dict(json.loads(args.resume_from.read_text()))
    model = DistributedDataParallel(torch.nn.Linear(1, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    report = {"len": len(loader), "epochs": []}
    for epoch in range(args.epochs):
        if not args.resume_from:
            dataset.set_epoch(epoch)
        keys, steps = [], 0
        for batch in loader:
            start = time.perf_counter()
            features = torch.log1p(batch["size"].float()).unsqueeze(1)
            loss = torch.nn.functional.cross_entropy(model(features), batch["label"].clamp(min=0) % 8)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            dataset.observe(time.perf_counter() - start, batch["size"])
            keys += batch["key"]
            steps += 1
            if steps == args.stop_after:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"state-rank{rank}.json").write_text(json.dumps(loader.state_dict()))
                break
        report["epochs"].append({"steps": steps, "keys": keys, "cost_model": dataset.cost_model})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Train a tiny CNN on a corgi image pack with DDP on CPU, checkpointing and resuming exactly.

    corgi pack examples/corpus /tmp/corgi-example --kind image --overwrite   # the README's first command
    torchrun --nproc_per_node=2 examples/train_ddp.py /tmp/corgi-example --checkpoint-dir /tmp/ckpt

Any pack of labelled images will do (`corgi pack /data/images /tmp/images-pack`: a folder of class
folders of images); a pack that also holds videos or texts is refused before training, in one line,
since this script decodes every sample as an image (decode="rgb"). Without `--checkpoint-dir` it trains
without saving or resuming.

Run the same command again after a crash or a kill: it resumes from the last checkpoint, with
the model, the optimizer and the loader state, and the epoch goes on with exactly the samples
that were not trained on yet (those trained after the checkpoint are trained again).

What it shows, in the order a training script needs it:

- `CorgiPileDataset(..., batching=Batches(B), ranks=Ranks(balance="size"), decode="rgb", transform=resize)`: the
  dataset yields whole collated batches (`data`: a float tensor (B, 3, S, S); `label`: int64),
  size-balanced across the ranks so that no rank waits for another at each step;
- `StatefulDataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)`:
  `len(loader)` is the number of steps per epoch, equal on every rank;
- `dataset.set_epoch(epoch)` before each epoch: a new block order and new shuffles;
- every `--checkpoint-every` steps, one file with the model, the optimizer and every rank's
  loader state (small JSON-able data), written by rank 0 to a temporary name and renamed.

`--log-keys DIR` appends "epoch step key" lines to DIR/rank<r>.tsv after each step, so you (or
tests/e2e/test_train_example.py) can check that an interrupted epoch trains every sample once.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io.loaders import Batches, CorgiPileDataset, Ranks
from corgi_io.manifest.fields import KINDS

CHECKPOINT = "checkpoint.pt"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pack", help="a pack of labelled images: a folder, or an http:// / s3:// URL")
    parser.add_argument("--checkpoint-dir", type=Path, help="where checkpoint.pt is kept (none: no checkpoints)")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--image-size", type=int, default=32, help="images are resized to this square")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-keys", type=Path, help="append 'epoch step key' lines to DIR/rank<r>.tsv")
    return parser.parse_args()


def resize(image: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 (H, W, 3) -> float (3, size, size) in [0, 1]: a fixed shape, so the batch can be stacked."""
    pixels = image.permute(2, 0, 1).unsqueeze(0).float().div_(255)
    return torch.nn.functional.interpolate(pixels, size=(size, size), mode="bilinear", antialias=True)[0]


def tiny_cnn(classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, classes))


def gather_json(value) -> list:
    """Every rank's JSON-able `value`, in rank order (an all_gather of UTF-8 bytes; nothing is unpickled)."""
    data = torch.frombuffer(bytearray(json.dumps(value).encode()), dtype=torch.uint8)
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(lengths, torch.tensor([len(data)]))
    longest = int(max(lengths))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[:len(data)] = data
    gathered = [torch.empty(longest, dtype=torch.uint8) for _ in lengths]
    dist.all_gather(gathered, padded)
    return [json.loads(bytes(g[:int(n)].numpy())) for g, n in zip(gathered, lengths)]


def save_checkpoint(path: Path | None, step: int, epoch: int, model, optimizer, loader) -> None:
    """Rank 0 writes one file for all ranks, atomically: a kill leaves the previous checkpoint whole."""
    if path is None:  # the same on every rank, so no rank waits in the gather below
        return
    loader_states = gather_json(loader.state_dict())  # a collective: every rank takes part
    if dist.get_rank() != 0:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"step": step, "epoch": epoch, "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(), "loaders": [json.dumps(s) for s in loader_states]}, temporary)
    os.replace(temporary, path)


def load_checkpoint(path: Path | None, model, optimizer, loader) -> tuple[int, int]:
    """(step, epoch) of the last checkpoint, its states loaded; (0, 0) when there is none."""
    if path is None or not path.exists():
        return 0, 0
    state = torch.load(path, weights_only=True)  # plain data only: tensors, numbers, strings
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    loader.load_state_dict(json.loads(state["loaders"][dist.get_rank()]))
    return state["step"], state["epoch"]


def images_only(dataset) -> str | None:
    """None when every sample of the pack is an image, else one line saying what to do: this script decodes
    every sample as an image, and would stop at the first video or text with a traceback from each rank."""
    manifest = dataset.manifest
    counts = np.bincount(np.asarray(manifest.samples.kind), minlength=len(KINDS))  # one pass, no sort
    others = sorted({KINDS[k] for k in np.flatnonzero(counts)} - {"image"})
    if not others:
        return None
    return (f"{manifest.root} holds {', '.join(others)} samples besides images: pack it with --kind image "
            f"(corgi pack SOURCE OUTPUT --kind image), or read it with decode=\"auto\" in your own script")


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)  # the same initial weights on every rank
    dataset = CorgiPileDataset(args.pack, batching=Batches(args.batch_size), ranks=Ranks(balance="size"),
                               decode="rgb", transform=functools.partial(resize, size=args.image_size))
    problem = images_only(dataset)
    if problem is not None:  # every rank sees the same manifest, so every rank stops here
        report(f"train_ddp.py: {problem}")
        dist.destroy_process_group()
        raise SystemExit(2)
    model = DistributedDataParallel(tiny_cnn(max(len(dataset.manifest.labels), 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=args.workers,
                                persistent_workers=args.workers > 0)
    checkpoint = None
    if args.checkpoint_dir is not None:
        args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = args.checkpoint_dir / CHECKPOINT
    step, first_epoch = load_checkpoint(checkpoint, model, optimizer, loader)
    report(f"{'resuming at' if step else 'starting'} step {step}, epoch {first_epoch}; "
           f"{len(loader)} steps per epoch on each of {dist.get_world_size()} ranks")
    with open_keys_log(args.log_keys) as keys_log:
        for epoch in range(first_epoch, args.epochs):
            dataset.set_epoch(epoch)  # before iter(loader): a new block order, in the persistent workers too
            started = time.perf_counter()
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["data"]), batch["label"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                keys_log.write("".join(f"{epoch}\t{step}\t{key}\n" for key in batch["key"]))
                keys_log.flush()  # before the checkpoint: a step in a checkpoint is always in the log
                if step % args.checkpoint_every == 0:
                    save_checkpoint(checkpoint, step, epoch, model, optimizer, loader)
                if step % 10 == 0:
                    report(f"epoch {epoch} step {step} loss {loss.item():.3f}")
            report(f"epoch {epoch} done in {time.perf_counter() - started:.1f} s")
    save_checkpoint(checkpoint, step, args.epochs, model, optimizer, loader)  # a rerun of a finished run trains nothing
    dist.destroy_process_group()


def report(line: str) -> None:
    if dist.get_rank() == 0:
        print(line, flush=True)


def open_keys_log(folder: Path | None):
    """DIR/rank<r>.tsv opened for appending, or a sink when no folder is given."""
    if folder is None:
        return open(os.devnull, "w")
    folder.mkdir(parents=True, exist_ok=True)
    return open(folder / f"rank{dist.get_rank()}.tsv", "a", encoding="utf-8")


if __name__ == "__main__":
    main()

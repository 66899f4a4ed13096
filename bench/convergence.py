"""Shuffle quality, CorgiPile-paper style: train on a label-clustered pack with each shuffle mode.

A 10-class Gaussian-mixture problem (one small .txt feature vector per sample, Bayes
accuracy about 93 %) is packed with ``order="keep"`` from a listing SORTED BY LABEL, so the
pack's natural order is fully clustered: all class 0, then all class 1, ...  A small MLP
is trained with plain SGD (fixed learning rate) for a few epochs on the stream of each
loader mode -- none, window, block, corgipile, full -- with the same seed and the same
buffer memory (buffer_blocks = 10 % of the blocks; "window" holds as many samples as that
by construction; like tf.data's shuffle or webdataset's, it slides over the pack's stored
order).

Each line reports the final test accuracy (mean over --seeds training seeds, with their
range), its difference from "full" measured in the same run, the mean label entropy per
batch over the first epoch (bits; log2(10) = 3.32 is the most a batch can have), and the
test accuracy after every epoch.

    python bench/convergence.py [--n 40000] [--epochs 5] [--seeds 3] [--plot docs/figures/convergence.png]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _classification import decode_features, make_classification_corpus  # noqa: E402

MODES = ("none", "window", "block", "corgipile", "full")
BASELINE = "full"


def batches(dataset, batch_size: int):
    """(features [b, dim], labels [b]) batches from the dataset's stream, in its order."""
    xs, ys = [], []
    for sample in dataset:
        xs.append(sample["data"])
        ys.append(sample["label"])
        if len(ys) == batch_size:
            yield torch.from_numpy(np.stack(xs)), torch.tensor(ys)
            xs, ys = [], []
    if ys:
        yield torch.from_numpy(np.stack(xs)), torch.tensor(ys)


def label_entropy(labels: torch.Tensor, classes: int) -> float:
    """Empirical entropy (bits) of the labels in one batch."""
    p = torch.bincount(labels, minlength=classes).double() / len(labels)
    p = p[p > 0]
    return float(-(p * p.log2()).sum())


def make_model(dim: int, classes: int, hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes))


@torch.no_grad()
def accuracy(model, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(x).argmax(1) == y).float().mean())


def train(root, mode: str, args, seed: int, x_test, y_test, classes: int, dim: int):
    """Train one model on `mode`'s stream; returns (test accuracy per epoch, mean batch entropy in epoch 0)."""
    from corgi_io.loaders import CorgiPileDataset, Shuffle

    torch.manual_seed(seed)                          # same initial weights for every mode
    model = make_model(dim, classes, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    dataset = CorgiPileDataset(root, shuffle=Shuffle(mode, args.buffer_blocks), seed=seed, decode=decode_features)
    accuracies, entropies = [], []
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        model.train()
        for x, y in batches(dataset, args.batch_size):
            if epoch == 0:
                entropies.append(label_entropy(y, classes))
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
        model.eval()
        accuracies.append(accuracy(model, x_test, y_test))
    return accuracies, float(np.mean(entropies))


def plot(path: Path, results: dict, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    styles = ["-", "--", ":", "-."]
    for j, (mode, (accs, _)) in enumerate(results.items()):
        ax.plot(range(1, len(accs) + 1), [100 * a for a in accs], marker="os^vDx"[j % 6], linestyle=styles[j % 4],
                label=mode)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_xticks(range(1, len(next(iter(results.values()))[0]) + 1))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40000, help="training samples (the test set is --n-test more)")
    parser.add_argument("--n-test", type=int, default=10000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--separation", type=float, default=4.0, help="distance of each class mean from the origin")
    parser.add_argument("--block-samples", type=int, default=100)
    parser.add_argument("--buffer-fraction", type=float, default=0.10, help="buffer = this fraction of the blocks")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="training seed: weights, block order, shuffles")
    parser.add_argument("--seeds", type=int, default=3, help="training runs per mode (seeds --seed, --seed+1, ...); "
                        "accuracies are averaged")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the generated data set")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--plot", type=Path, default=None, help="write test accuracy per epoch per mode (PNG)")
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "convergence")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()

    from corgi_io import PackOptions, pack

    listing, x_test, y_test = make_classification_corpus(args.workdir / "corpus", args.n, args.n_test, args.classes,
                                                         args.dim, args.separation, args.data_seed)
    root = args.workdir / "pack"
    manifest = pack(listing, root, PackOptions(format="wds", order="keep", block_samples=args.block_samples),
                    workers=2, overwrite=True, progress=False)
    labels = manifest.samples.label
    assert np.all(np.diff(labels) >= 0), "the pack is meant to be sorted by label"
    args.buffer_blocks = max(1, round(args.buffer_fraction * len(manifest.blocks)))
    buffer_samples = int(args.buffer_blocks * manifest.blocks.count.mean())
    print(f"# {manifest.num_samples} training samples sorted by label ({args.classes} classes, dim {args.dim}), "
          f"{len(x_test)} test; {len(manifest.blocks)} blocks of {args.block_samples}; buffer {args.buffer_blocks} "
          f"blocks = {buffer_samples} samples ({buffer_samples / manifest.num_samples:.0%}); MLP {args.dim}-"
          f"{args.hidden}-{args.classes}, SGD lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, "
          f"mean of {args.seeds} seed(s) from {args.seed}")
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)

    modes = args.modes.split(",")
    seeds = range(args.seed, args.seed + args.seeds)
    runs = {mode: [] for mode in modes}          # mode -> [(accuracy per epoch, entropy, seconds) per seed]
    for seed in seeds:
        for mode in modes:
            t0 = time.perf_counter()
            accs, entropy = train(root, mode, args, seed, x_test, y_test, args.classes, args.dim)
            runs[mode].append((np.array(accs), entropy, time.perf_counter() - t0))
    results = {mode: (np.mean([r[0] for r in rs], axis=0), float(np.mean([r[1] for r in rs]))) for mode, rs in runs.items()}
    base = results[BASELINE][0][-1] if BASELINE in results else None
    for mode in modes:
        accs, entropy = results[mode]
        finals = [100 * r[0][-1] for r in runs[mode]]
        spread = f" (seeds {min(finals):.2f}..{max(finals):.2f})" if len(finals) > 1 else ""
        delta = f" {100 * (accs[-1] - base):+6.2f} pp vs {BASELINE}" if base is not None else ""
        print(f"convergence {mode:14s} test acc {100 * accs[-1]:6.2f}%{spread}{delta}  "
              f"batch label entropy {entropy:4.2f} bits (max {math.log2(args.classes):.2f})  "
              f"acc by epoch {' '.join(f'{100 * a:.1f}' for a in accs)}  "
              f"({sum(r[2] for r in runs[mode]) / len(runs[mode]):.0f} s/run)")
    if args.plot:
        plot(args.plot, {m: results[m][:2] for m in modes},
             f"{manifest.num_samples} label-sorted samples, buffer {buffer_samples / manifest.num_samples:.0%}, "
             f"MLP + SGD lr {args.lr}, batch {args.batch_size}")
        print(f"# plot written to {args.plot}")
    print(f"# total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

"""Benchmark data: a 10-class Gaussian-mixture classification problem stored as one small .txt file per sample.

Each class k has a mean mu_k (random direction, fixed length); a sample is mu_k plus
correlated Gaussian noise (a random shared covariance), written as whitespace-separated
floats.  The noise is strong enough that the classes overlap: a well-trained linear model
gets roughly 90 %, and a model that has drifted towards the classes it saw last loses
that quickly.  The training listing is SORTED BY LABEL (all class 0 first, then class 1,
...), so a pack made from it with ``order="keep"`` is fully clustered.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def gaussian_mixture(n: int, classes: int, dim: int, separation: float, seed: int, rng_stream: int):
    """(features float32 [n, dim], labels int64 [n]) with balanced classes, sorted by label.

    The class means and noise covariance depend on `seed` only, so train and test
    (different `rng_stream`) come from the same distribution.
    """
    params = np.random.default_rng([seed, 0])
    directions = params.standard_normal((classes, dim))
    means = separation * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    extra = params.standard_normal((dim, dim)) / np.sqrt(dim)   # shared anisotropic part: covariance I + extra^T extra
    rng = np.random.default_rng([seed, rng_stream])
    labels = np.sort(np.arange(n) % classes)
    noise = rng.standard_normal((n, dim)) + rng.standard_normal((n, dim)) @ extra
    return (means[labels] + noise).astype(np.float32), labels.astype(np.int64)


def make_classification_corpus(root, n: int = 40000, n_test: int = 10000, classes: int = 10, dim: int = 32,
                               separation: float = 4.0, seed: int = 0):
    """Write the training samples as `root/samples/k/NNNNNN.txt` plus `root/train.csv` (sorted by label).

    Returns (listing path, test features, test labels).  Reuses the files if already there.
    """
    root = Path(root)
    listing = root / "train.csv"
    marker = root / f".complete-{n}-{classes}-{dim}-{separation}-{seed}"
    x_test, y_test = gaussian_mixture(n_test, classes, dim, separation, seed, rng_stream=2)
    if marker.exists():
        return listing, x_test, y_test
    for old in root.glob(".complete-*"):
        old.unlink()
    x, y = gaussian_mixture(n, classes, dim, separation, seed, rng_stream=1)
    rows = []
    for i, (features, label) in enumerate(zip(x, y.tolist())):
        rel = f"samples/{label}/{i:06d}.txt"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(" ".join(f"{v:.4f}" for v in features.tolist()) + "\n")
        rows.append((rel, label, f"s{i:06d}"))
    with open(listing, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "key"])
        writer.writerows(rows)                     # already sorted by label: the clustered order
    marker.touch()
    return listing, x_test, y_test


def decode_features(data: bytes, sample: dict) -> np.ndarray:
    """CorgiPileDataset decode callable: the .txt payload as a float32 vector."""
    return np.fromstring(data, dtype=np.float32, sep=" ")

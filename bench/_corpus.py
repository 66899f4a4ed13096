"""Benchmark data: a folder of JPEGs whose pixel counts follow a long-tailed (lognormal) law."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image


def make_jpeg_corpus(root, n: int = 3000, classes: int = 10, seed: int = 0) -> Path:
    """Write `n` JPEGs into `root/class_k/` (reused if already there); widths are lognormal, median 160 px."""
    root = Path(root)
    marker = root / f".complete-{n}-{classes}-{seed}"
    if marker.exists():
        return root
    rng = np.random.default_rng(seed)
    widths = np.clip(rng.lognormal(np.log(160), 0.6, n), 16, 1600).astype(int)
    aspect = rng.uniform(0.5, 1.5, n)
    for i, (w, a) in enumerate(zip(widths, aspect)):
        h = max(16, int(w * a))
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        small = rng.integers(0, 256, (max(1, h // 8), max(1, w // 8), 3), dtype=np.uint8)
        Image.fromarray(small).resize((w, h), Image.BILINEAR).save(folder / f"img_{i:06d}.jpg", quality=85)
    marker.touch()
    return root


def corpus_files(root) -> list:
    """(path, label) of every JPEG under root, sorted."""
    root = Path(root)
    return [(str(p), int(p.parent.name.split("_")[1])) for p in sorted(root.glob("class_*/*.jpg"))]


def drop_page_cache(paths) -> None:
    """Evict files from the page cache (POSIX_FADV_DONTNEED), so the next read comes from the device."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

"""Benchmark data: folders of JPEGs whose pixel counts follow a long-tailed law, and ImageNet-sized photo-like JPEGs."""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image


def lognormal_widths(rng, n: int) -> np.ndarray:
    """Widths with a lognormal law, median 160 px, clipped to 16..1600."""
    return np.clip(rng.lognormal(np.log(160), 0.6, n), 16, 1600).astype(int)


def mixture_widths(rng, n: int) -> np.ndarray:
    """The load benchmark's long tail (issue 10): 90% at 64..256 px, 10% at 256..1024 px."""
    large = rng.random(n) < 0.1
    return np.where(large, rng.integers(256, 1025, n), rng.integers(64, 257, n))


WIDTHS = {"lognormal": lognormal_widths, "mixture": mixture_widths}


def make_jpeg_corpus(root, n: int = 3000, classes: int = 10, seed: int = 0, widths: str = "lognormal") -> Path:
    """Write `n` JPEGs into `root/class_k/` (reused if already there), widths drawn by `WIDTHS[widths]`."""
    root = Path(root)
    # beside the corpus, not in it: a hidden file inside would be a skipped input of every pack of it
    marker = root.with_name(root.name + f".complete-{n}-{classes}-{seed}" + ("" if widths == "lognormal" else f"-{widths}"))
    if marker.exists():
        return root
    rng = np.random.default_rng(seed)
    widths = WIDTHS[widths](rng, n)
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


def photo_jpeg(rng, width: int, height: int, grain: int = 12, quality: int = 90) -> bytes:
    """A photo-like JPEG: a smooth colour field plus uniform grain of +-`grain` (more grain: larger files)."""
    coarse = Image.fromarray(rng.integers(0, 256, (height // 25 + 1, width // 25 + 1, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    noise = rng.integers(-grain, grain + 1, (height, width, 3), dtype=np.int16)
    out = io.BytesIO()
    Image.fromarray(np.clip(smooth + noise, 0, 255).astype(np.uint8)).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def make_jpegs(n: int, long_side: int, seed: int = 0, grain: int = 12, quality: int = 90) -> list:
    """`n` photo-like JPEGs in memory, alternately landscape and portrait, 4:3 (500 -> 500x375 and 375x500)."""
    rng = np.random.default_rng(seed)
    short = long_side * 3 // 4
    return [photo_jpeg(rng, *((long_side, short) if i % 2 == 0 else (short, long_side)), grain, quality)
            for i in range(n)]


def make_imagenet_folder(root, n: int = 5000, classes: int = 10, seed: int = 0, long_side: int = 500,
                         grain: int = 16, quality: int = 95) -> Path:
    """`n` photo-like JPEGs of long_side x 3/4 long_side, landscape and portrait in turn (by default ImageNet-sized:
    500x375 and 375x500, about 110 KB: grain 16, quality 95) as `root/class_k/img_i.jpg`, reused if already there
    (a marker beside the folder says it is complete)."""
    root = Path(root)
    marker = root.with_name(root.name + f".complete-{n}-{classes}-{seed}-{long_side}-{grain}-{quality}")
    if marker.exists():
        return root
    rng = np.random.default_rng(seed)
    short = long_side * 3 // 4
    for i in range(n):
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        size = (long_side, short) if i % 2 == 0 else (short, long_side)
        (folder / f"img_{i:06d}.jpg").write_bytes(photo_jpeg(rng, *size, grain=grain, quality=quality))
    marker.touch()
    return root


def make_wds_tars(root, n: int, per_tar: int, sample, name: str = "part") -> list:
    """`n` samples written by `webdataset.TarWriter` into `root/<name>-<k>.tar`, `per_tar` in each (reused if already
    there); `sample(i)` gives the fields of sample i (``__key__`` is added).  Returns the tar paths, sorted."""
    import webdataset as wds

    root = Path(root)
    marker = root.with_name(root.name + f".complete-{n}-{per_tar}")  # beside the tars, not among them
    paths = [root / f"{name}-{k:06d}.tar" for k in range((n + per_tar - 1) // per_tar)]
    if marker.exists():
        return paths
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("*.tar"):
        old.unlink()
    for k, path in enumerate(paths):
        with wds.TarWriter(str(path)) as sink:
            for i in range(k * per_tar, min(n, (k + 1) * per_tar)):
                sink.write({"__key__": f"{i:08d}", **sample(i)})
    marker.touch()
    return paths

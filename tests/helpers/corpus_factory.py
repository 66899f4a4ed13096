"""Offline builders for small test corpora: images, videos, text, broken files, listings.

Every writer creates parent folders, is deterministic for a given seed and returns the
per-sample size that corgi-io records: pixels ``w*h`` for images, frame count for videos,
whitespace tokens ``len(text.split())`` for text. Classes follow the ImageFolder
convention: the first path component under the corpus root is the label.
"""

from __future__ import annotations

import csv
import io
import json
import struct
import zlib
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import cv2
import numpy as np
from PIL import Image

_FOURCC = {".avi": "MJPG", ".mp4": "mp4v"}
_WORDS = ("corgi", "shard", "pile", "fête", "naïve", "ñandú", "smörgåsbord", "日本語",
          "Ωmega", "über", "data", "block", "shuffle", "rank", "café")
_SEPARATORS = (" ", " ", " ", "\n", "\t", "  ")


class Expected(NamedTuple):
    """What a corpus file should be recorded as."""

    kind: str  # "image" | "video" | "text"
    label_name: str
    size: int  # pixels, frames or tokens
    nbytes: int


def _pixels(width: int, height: int, seed: int) -> np.ndarray:
    """Smooth random colour field plus seed-dependent noise, as an RGB uint8 array."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
    base = np.asarray(coarse.resize((width, height), Image.BILINEAR), dtype=np.int16)
    noise = rng.normal(0.0, 4.0 + seed % 24, (height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _mkparent(path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_image(path: str | Path, width: int, height: int, fmt: str | None = None,
                seed: int = 0) -> int:
    """Write an RGB image with Pillow and return its pixel count ``width * height``.

    ``fmt`` is a Pillow format name; by default it follows the extension, case-insensitively
    (``.JPG`` -> JPEG). Content varies with ``seed`` so encoded sizes differ.
    """
    path = _mkparent(path)
    fmt = fmt or Image.registered_extensions()[path.suffix.lower()]
    Image.fromarray(_pixels(width, height, seed)).save(path, format=fmt)
    return width * height


def write_video(path: str | Path, frames: int, width: int = 64, height: int = 48,
                fps: int = 10) -> int:
    """Write ``frames`` frames with cv2.VideoWriter (.avi: MJPG, .mp4: mp4v); return ``frames``."""
    if frames < 1:
        raise ValueError("a video needs at least one frame")
    path = _mkparent(path)
    fourcc = cv2.VideoWriter_fourcc(*_FOURCC[path.suffix.lower()])
    writer = cv2.VideoWriter(str(path), fourcc, fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"cv2.VideoWriter cannot open {path}")
    try:
        for i in range(frames):
            writer.write(_pixels(width, height, i)[:, :, ::-1].copy())  # RGB -> BGR
    finally:
        writer.release()
    return frames


def write_text(path: str | Path, n_tokens: int, seed: int = 0) -> int:
    """Write UTF-8 text of ``n_tokens`` words (some non-ASCII) and return ``len(text.split())``."""
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(n_tokens):
        parts.append(_WORDS[rng.integers(len(_WORDS))])
        parts.append(_SEPARATORS[rng.integers(len(_SEPARATORS))] if i < n_tokens - 1 else "\n")
    text = "".join(parts)
    _mkparent(path).write_text(text, encoding="utf-8")
    return len(text.split())


def write_truncated_jpeg(path: str | Path) -> None:
    """Write a valid 128x96 JPEG cut halfway through its scan data.

    The headers are intact, so ``PIL.Image.open`` succeeds and reports the size, but
    decoding fails and the EOI marker ``FFD9`` is missing.
    """
    buf = io.BytesIO()
    Image.fromarray(_pixels(128, 96, 7)).save(buf, format="JPEG")
    data = buf.getvalue()
    scan = data.index(b"\xff\xda")  # start-of-scan marker: everything after is pixel data
    _mkparent(path).write_bytes(data[: scan + (len(data) - scan) // 2])


def png_claiming(width: int, height: int) -> bytes:
    """A valid-looking RGB PNG whose header claims width x height, with a few bytes of pixel data (and an IEND).

    Pillow reads the size from the header alone, which is what a bomb exploits: decoding it
    would allocate width * height * 3 bytes.  A small one (8x8) is an image whose header and
    chunks are sound but whose pixels cannot be decoded ("image file is truncated").
    """
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def write_garbage_video(path: str | Path) -> None:
    """Write bytes that OpenCV cannot open as a video, whatever the extension."""
    junk = np.random.default_rng(13).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    _mkparent(path).write_bytes(b"this is not a video\n" + junk)


def write_non_utf8_text(path: str | Path) -> None:
    """Write Latin-1 text plus stray bytes that fail ``bytes.decode("utf-8")``."""
    _mkparent(path).write_bytes("café crème brûlée naïve\n".encode("latin-1") + b"\x80\x81\n")


def _expected(root: Path, rel: str, kind: str, size: int) -> Expected:
    return Expected(kind, rel.split("/")[0], size, (root / rel).stat().st_size)


def make_mixed_corpus(root: str | Path, n_per_class: int = 3,
                      classes: tuple[str, ...] = ("cat", "dog", "bird"),
                      with_tricky_names: bool = True, seed: int = 0) -> dict[str, Expected]:
    """Build a class-folder corpus with ``n_per_class`` images, videos and texts per class.

    Images alternate .jpg/.png (16..96 px sides), videos alternate .avi/.mp4 (2..12 frames),
    texts have 1..40 tokens. With ``with_tricky_names`` a few more files are spread over the
    classes: dotted, spaced and unicode names, upper-case extensions, nested subfolders.
    Returns ``{posix relpath: Expected}`` for every file written.
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    out: dict[str, Expected] = {}

    def image(rel: str) -> None:
        w, h = (int(v) for v in rng.integers(16, 97, 2))
        size = write_image(root / rel, w, h, seed=int(rng.integers(1 << 16)))
        out[rel] = _expected(root, rel, "image", size)

    def video(rel: str) -> None:
        out[rel] = _expected(root, rel, "video", write_video(root / rel, int(rng.integers(2, 13))))

    def text(rel: str) -> None:
        size = write_text(root / rel, int(rng.integers(1, 41)), seed=int(rng.integers(1 << 16)))
        out[rel] = _expected(root, rel, "text", size)

    for c in classes:
        for i in range(n_per_class):
            image(f"{c}/img_{i:03d}.{'jpg' if i % 2 == 0 else 'png'}")
            video(f"{c}/vid_{i:03d}.{'avi' if i % 2 == 0 else 'mp4'}")
            text(f"{c}/txt_{i:03d}.txt")
    if with_tricky_names:
        k = len(classes)
        image(f"{classes[0]}/a.b.c.jpg")
        image(f"{classes[0]}/my photo.png")
        image(f"{classes[1 % k]}/fête_ñ.jpg")
        image(f"{classes[1 % k]}/UPPER.JPG")
        image(f"{classes[2 % k]}/SHOUT.PNG")
        video(f"{classes[2 % k]}/CLIP.MP4")
        image(f"{classes[0]}/sub/deeper/nested.jpg")
        video(f"{classes[1 % k]}/sub dir/clip.v2.avi")
        text(f"{classes[2 % k]}/notes/readme.md")
    return out


def make_image_corpus(root: str | Path, n: int,
                      classes: tuple[str, ...] = ("cat", "dog", "bird"),
                      long_tail: bool = True, seed: int = 0) -> dict[str, Expected]:
    """Build ``n`` images dealt round-robin over ``classes``; return ``{relpath: Expected}``.

    With ``long_tail`` widths are lognormal (median 64, clipped to 8..1024) so a few images
    carry most of the pixels; otherwise widths are uniform in 32..96. Aspect ratios are
    uniform in 0.5..2. Every fifth image is PNG, the rest JPEG.
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    out: dict[str, Expected] = {}
    for i in range(n):
        if long_tail:
            w = int(np.clip(rng.lognormal(np.log(64), 0.9), 8, 1024))
        else:
            w = int(rng.integers(32, 97))
        h = max(1, int(w / rng.uniform(0.5, 2.0)))
        rel = f"{classes[i % len(classes)]}/{i:06d}.{'png' if i % 5 == 4 else 'jpg'}"
        size = write_image(root / rel, w, h, seed=int(rng.integers(1 << 16)))
        out[rel] = _expected(root, rel, "image", size)
    return out


def write_listing(path: str | Path, entries: Iterable[str | Path | Mapping[str, object]],
                  fmt: str = "csv") -> None:
    """Write a listing file with columns ``path`` and optional ``label``, ``key``.

    ``entries`` are paths or mappings with a ``path`` item. ``fmt="csv"`` writes a header of
    the columns any entry uses (empty cells where missing); ``fmt="jsonl"`` writes one object
    per line holding only the entry's own columns.
    """
    rows = [{"path": str(e)} if isinstance(e, (str, Path)) else dict(e) for e in entries]
    path = _mkparent(path)
    if fmt == "csv":
        cols = [c for c in ("path", "label", "key") if any(c in r for r in rows)] or ["path"]
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "jsonl":
        with path.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({c: r[c] for c in ("path", "label", "key") if c in r},
                                   ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"unknown listing format {fmt!r}")

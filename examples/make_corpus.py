"""Regenerate examples/corpus/, the small raw corpus used in the README and examples.

Run ``python3 examples/make_corpus.py``; it deletes and rebuilds ``examples/corpus`` from a
fixed seed. The label is the first folder under the root (ImageFolder convention), an animal,
for every kind: ``cat/``, ``dog/`` and ``bird/`` each hold

* 7 images, JPEG and PNG, 32x32 to 320x240 (``cat/my cat.jpg`` has a space, ``dog/dog.v2.png`` dots);
* 1 or 2 short videos, MJPG .avi and mp4v .mp4, 8 to 40 frames (``bird/bird_jump.mp4``);
* 1 or 2 UTF-8 text notes, .txt and .md (``cat/fête du chat.txt`` has a unicode name).

So one pack mixes the three kinds under one label scheme: ``decode="auto"`` decodes each sample
by its kind, and ``corgi pack examples/corpus OUT --kind image`` packs only the images (the other
files are skipped, each with its reason).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent / "corpus"
SIZES = [(32, 32), (64, 48), (96, 96), (128, 96), (160, 120), (240, 180), (320, 240)]
IMAGES = {  # class -> file names, paired in order with SIZES
    "cat": "cat_0.jpg,cat_1.png,my cat.jpg,cat_3.jpg,cat_4.png,cat_5.jpg,cat_6.jpg",
    "dog": "dog_0.jpg,dog.v2.png,dog_2.jpg,dog_3.jpg,dog_4.jpg,dog_5.png,dog_6.jpg",
    "bird": "bird_0.png,bird_1.jpg,bird_2.jpg,bird_3.png,bird_4.jpg,bird_5.jpg,bird_6.jpg",
}
CLIPS = [("cat", "cat_walk.avi", 8, 64, 48), ("dog", "dog_run.mp4", 16, 96, 72),
         ("cat", "cat_sit.avi", 24, 64, 48), ("bird", "bird_jump.mp4", 40, 80, 60)]  # label, name, frames, w, h
NOTES = [("cat", "cat_notes.txt", 12), ("dog", "dog_notes.md", 40), ("cat", "fête du chat.txt", 25),
         ("bird", "bird_notes.md", 80), ("dog", "dog_todo.txt", 6)]  # label, name, whitespace tokens
WORDS = "corgi shard block shuffle rank size café naïve über 日本語 fête".split()


def pixels(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A smooth random colour field with light noise, RGB uint8 of shape (height, width, 3)."""
    coarse = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
    base = np.asarray(coarse.resize((width, height), Image.BILINEAR), dtype=np.float64)
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def main() -> None:
    """Delete and rebuild ``ROOT``, then print each file with its size."""
    rng = np.random.default_rng(2024)
    shutil.rmtree(ROOT, ignore_errors=True)
    for label, names in IMAGES.items():
        (ROOT / label).mkdir(parents=True)
        for name, (w, h) in zip(names.split(","), SIZES):
            Image.fromarray(pixels(rng, w, h)).save(ROOT / label / name, quality=85)
    for label, name, frames, w, h in CLIPS:
        fourcc = cv2.VideoWriter_fourcc(*("MJPG" if name.endswith(".avi") else "mp4v"))
        writer = cv2.VideoWriter(str(ROOT / label / name), fourcc, 10, (w, h))
        for _ in range(frames):
            writer.write(pixels(rng, w, h))
        writer.release()
    for label, name, n_tokens in NOTES:
        words = [WORDS[i] for i in rng.integers(len(WORDS), size=n_tokens)]
        lines = [" ".join(words[i:i + 10]) for i in range(0, n_tokens, 10)]
        (ROOT / label / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for path in sorted(p for p in ROOT.rglob("*") if p.is_file()):
        print(f"{path.stat().st_size:8d}  {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

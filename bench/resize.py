"""Pack-time resize: `ImageResize` against a plain Pillow open -> resize(LANCZOS) -> save loop.

Both contenders shrink the same in-memory JPEGs (500 ImageNet-sized pictures, 500x375 and 375x500,
made with Pillow) to a longer side of --max-side and encode them as JPEG at the same quality.  The
contenders run interleaved, round after round; each line is the median of the rounds, with its
ratio against the Pillow baseline (above 1: faster).  A second set at --large-side (1600x1200)
shows what libjpeg's draft scaling gains where it applies.

    python bench/resize.py [--n 500] [--rounds 5] [--max-side 256] [--large-side 1600]
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus import make_jpegs  # noqa: E402
from _timing import interleaved_medians  # noqa: E402

from corgi_io.packing.sample import PackSample  # noqa: E402
from corgi_io.packing.transforms.image import ImageResize, fit  # noqa: E402

QUALITY = 90


def pillow_loop(pictures: list, max_side: int) -> None:
    """The baseline: what a user writes without corgi-io."""
    for data in pictures:
        image = Image.open(io.BytesIO(data))
        out = io.BytesIO()
        image.resize(fit(*image.size, max_side), Image.Resampling.LANCZOS).save(out, format="JPEG", quality=QUALITY)


def transform_loop(pictures: list, max_side: int) -> None:
    resize = ImageResize(max_side, format="jpeg", quality=QUALITY)
    for i, data in enumerate(pictures):
        resize(PackSample(f"{i:06d}", 0, {"jpg": data}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-side", type=int, default=256)
    parser.add_argument("--large-side", type=int, default=1600, help="0: skip the large set")
    args = parser.parse_args()
    sets = {"500x375": make_jpegs(args.n, 500)}
    if args.large_side:
        sets[f"{args.large_side}x{args.large_side * 3 // 4}"] = make_jpegs(max(1, args.n // 10), args.large_side)
    for name, pictures in sets.items():
        medians = interleaved_medians({
            "pillow open->resize(LANCZOS)->save": lambda: pillow_loop(pictures, args.max_side),
            "corgi ImageResize": lambda: transform_loop(pictures, args.max_side)}, args.rounds)
        baseline = medians["pillow open->resize(LANCZOS)->save"]
        for contender, seconds in medians.items():
            print(f"resize {name} -> {args.max_side} n={len(pictures)} {contender}: "
                  f"{seconds / len(pictures) * 1e3:.2f} ms/image, {baseline / seconds:.2f}x the Pillow loop")


if __name__ == "__main__":
    main()

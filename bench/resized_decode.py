"""What the pack-time resize buys: RandomResizedCrop(176)+flip images/s from a pack resized to 256 against the original.

The same ImageNet-sized JPEGs (5,000 by default, 500x375 and 375x500, about 110 KB each) are packed
twice: as they are, and with `--image-max-side 256` (LANCZOS, JPEG quality 90).  Each pack is read
by CorgiPileDataset in this one process (no DataLoader workers) with the loader's own decode
(decode="pil") and one transform, the same for both: a torchvision-free RandomResizedCrop(176)
(torchvision's parameter draw: scale 0.08..1, ratio 3/4..4/3, 10 tries then a centre crop; Pillow's
BILINEAR resize of the box) and a horizontal flip with probability 1/2, giving a uint8 (176, 176, 3)
tensor.  Both transforms draw from the same seed.  After one warm-up epoch each (warm page cache),
the contenders read whole epochs interleaved, round after round; each line is the median of the
rounds, with its ratio against the original pack (above 1: faster).  Issue 18 asks for >= 2x.

    python bench/resized_decode.py [--n 5000] [--rounds 3] [--max-side 256] [--crop 176]
                                   [--workdir bench/out/resized_decode]

The corpus and the packs are made once under --workdir and reused (--workdir bench/out/pack_resize
reuses pack_resize.py's corpus).
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus import make_imagenet_folder  # noqa: E402
from _timing import interleaved_medians  # noqa: E402

from corgi_io import PackOptions, pack  # noqa: E402
from corgi_io.loaders import CorgiPileDataset  # noqa: E402
from corgi_io.loaders.decode import rgb_tensor  # noqa: E402

TARGET = 2.0  # issue 18 section 4: >= 2x images/s on the resized pack
ORIGINAL = "original pack (500x375)"


class RandomResizedCropFlip:
    """RandomResizedCrop(size) then RandomHorizontalFlip(0.5) on a PIL image, with Pillow only; a uint8 HWC tensor."""

    def __init__(self, size: int, seed: int = 0, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        self.size, self.scale, self.log_ratio = size, scale, (math.log(ratio[0]), math.log(ratio[1]))
        self.rng = random.Random(seed)

    def box(self, width: int, height: int) -> tuple:
        """(left, top, right, bottom) as torchvision draws it: a random area and aspect, else the centre crop."""
        area = width * height
        for _ in range(10):
            target = area * self.rng.uniform(*self.scale)
            aspect = math.exp(self.rng.uniform(*self.log_ratio))
            w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                left, top = self.rng.randint(0, width - w), self.rng.randint(0, height - h)
                return left, top, left + w, top + h
        w, h = min(width, height), min(width, height)  # the fallback for ratios in (3/4, 4/3): a centred square
        left, top = (width - w) // 2, (height - h) // 2
        return left, top, left + w, top + h

    def __call__(self, image: Image.Image) -> torch.Tensor:
        crop = image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=self.box(*image.size))
        if self.rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return rgb_tensor(crop)


def make_packs(source: Path, workdir: Path, max_side: int) -> dict:
    """{contender: pack folder}: the corpus packed as it is and resized to `max_side` (made once, then reused)."""
    packs = {ORIGINAL: (workdir / "pack-original", PackOptions()),
             f"pack resized to {max_side}": (workdir / f"pack-{max_side}", PackOptions(image_max_side=max_side))}
    for out, options in packs.values():
        if not (out / "manifest.json").exists():
            pack(source, out, options, workers=2, overwrite=True, progress=False)
    return {name: out for name, (out, _) in packs.items()}


def epoch(dataset, crop: int) -> int:
    """Samples of one epoch of `dataset`, each decoded and transformed (RuntimeError for a crop of another shape)."""
    count = 0
    for sample in dataset:
        if sample["data"].shape != (crop, crop, 3):
            raise RuntimeError(f"sample {sample['key']!r}: a crop of shape {tuple(sample['data'].shape)}")
        count += 1
    return count


def shard_megabytes(root: Path) -> float:
    """The MB of the shard files of the pack in `root` (what a loader reads)."""
    return sum(p.stat().st_size for p in root.glob("shard-*")) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-side", type=int, default=256)
    parser.add_argument("--crop", type=int, default=176)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/resized_decode"))
    args = parser.parse_args()
    packs = make_packs(make_imagenet_folder(args.workdir / f"imagenet-{args.n}", args.n), args.workdir, args.max_side)
    datasets = {name: CorgiPileDataset(root, decode="pil", transform=RandomResizedCropFlip(args.crop))
                for name, root in packs.items()}
    counts = {name: epoch(dataset, args.crop) for name, dataset in datasets.items()}  # warm-up epochs, untimed
    epochs = {name: lambda d=dataset: epoch(d, args.crop) for name, dataset in datasets.items()}
    median = interleaved_medians(epochs, args.rounds)
    print(f"# {args.n} JPEGs, CorgiPileDataset(decode='pil', transform=RandomResizedCrop({args.crop})+flip with "
          f"Pillow), one process, median of {args.rounds} interleaved rounds, warm page cache; shards: "
          + ", ".join(f"{name} {shard_megabytes(root):.1f} MB" for name, root in packs.items()))
    for name, seconds in median.items():
        print(f"resized-decode {name:26s} {counts[name] / seconds:8.0f} images/s "
              f"ratio {median[ORIGINAL] / seconds:5.2f}x vs the {ORIGINAL}")
    resized = next(name for name in median if name != ORIGINAL)
    ratio = median[ORIGINAL] / median[resized]
    verdict = "met" if ratio >= TARGET else "NOT met"
    print(f"target {resized} vs {ORIGINAL}: {ratio:5.2f}x (target >= {TARGET}x: {verdict})")


if __name__ == "__main__":
    main()

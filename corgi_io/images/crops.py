"""Where to crop and whether to flip: pure, vectorised geometry for `ImageDecoder`, seeded per sample.

Every random draw is a counter-based hash of ``(seed, epoch, sample index, draw number)``
(`sample_uniforms`, the splitmix64 finaliser), so a sample's crop depends on nothing else: not
on the batch it lands in, the worker that decodes it, the world size, or how many samples came
before it.  That is what makes crops reproducible and resume-exact without any state.

A box is ``(x, y, w, h)`` in the pixels of the original image; ``crop=`` chooses the rule
from `CROPS`:

* ``"random_resized"``: torchvision's `RandomResizedCrop` draw.  Ten tries of an area share in
  `scale` and a log-uniform aspect ratio in `ratio`; the first box that fits is placed uniformly.
  If none fits, the centred box of the whole image clamped to `ratio`.
* ``"center"``: the centred box of the output's aspect ratio, as large as the image allows
  (for a square output, the centred square of side min(W, H)).
* ``"none"``: the whole image (it is resized to the output, aspect ratio not kept).

Cost: O(n * tries) numpy work for n samples and no Python loop over them.
"""
from __future__ import annotations

import functools
import math

import numpy as np

TRIES = 10  # torchvision's RandomResizedCrop tries before its centred fallback
FLIP_DRAW = 4 * TRIES  # draw number of the flip: after the crop's four draws per try
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _splitmix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of a uint64 array (wrapping arithmetic): a bijection that scatters nearby keys."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@functools.lru_cache(maxsize=64)
def _epoch_key(seed: int, epoch: int) -> np.ndarray:
    """The hashed (seed, epoch): the part of every sample's key that an epoch shares (computed once)."""
    return _splitmix(_splitmix(np.asarray([seed], dtype=np.uint64)) ^ np.uint64(epoch))


def sample_uniforms(seed: int, epoch: int, indices, draws) -> np.ndarray:
    """(n, len(draws)) floats in [0, 1): draw number d of sample indices[i], a function of (seed, epoch, index, d)."""
    key = _splitmix(_epoch_key(int(seed), int(epoch)) ^ np.asarray(indices, dtype=np.int64).astype(np.uint64))
    bits = _splitmix(key[:, None] ^ (np.asarray(draws, dtype=np.uint64)[None, :] * _GOLDEN))
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def random_resized_boxes(widths, heights, uniforms: np.ndarray, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision RandomResizedCrop boxes (x, y, w, h), int64 arrays, from `uniforms` (n, 4 * TRIES): per try an
    area draw, a log-ratio draw and the two placement draws."""
    widths, heights = np.asarray(widths, dtype=np.int64), np.asarray(heights, dtype=np.int64)
    u = uniforms[:, :4 * TRIES].reshape(len(widths), TRIES, 4)
    area = (widths * heights)[:, None] * (scale[0] + (scale[1] - scale[0]) * u[..., 0])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(log_lo + (log_hi - log_lo) * u[..., 1])
    w, h = np.rint(np.sqrt(area * aspect)).astype(np.int64), np.rint(np.sqrt(area / aspect)).astype(np.int64)
    fits = (w > 0) & (h > 0) & (w <= widths[:, None]) & (h <= heights[:, None])
    first = np.argmax(fits, axis=1)
    rows = np.arange(len(widths))
    w, h = w[rows, first], h[rows, first]
    x = np.floor(u[rows, first, 2] * (widths - w + 1)).astype(np.int64)
    y = np.floor(u[rows, first, 3] * (heights - h + 1)).astype(np.int64)
    fallback = ~fits.any(axis=1)
    if fallback.any():
        fx, fy, fw, fh = _clamped_centre(widths[fallback], heights[fallback], ratio)
        x[fallback], y[fallback], w[fallback], h[fallback] = fx, fy, fw, fh
    return x, y, w, h


def _clamped_centre(widths: np.ndarray, heights: np.ndarray, ratio) -> tuple:
    """torchvision's fallback: the whole image, narrowed to the nearest aspect ratio in `ratio`, centred."""
    aspect = widths / heights
    w = np.where(aspect > ratio[1], np.rint(heights * ratio[1]), widths).astype(np.int64)
    h = np.where(aspect < ratio[0], np.rint(widths / ratio[0]), heights).astype(np.int64)
    return (widths - w) // 2, (heights - h) // 2, w, h


def center_boxes(widths, heights, out_size: tuple, uniforms=None, scale=None, ratio=None):
    """crop="center": the centred boxes of the output's aspect ratio (`out_size` is (height, width)), as large as
    each image allows."""
    widths, heights = np.asarray(widths, dtype=np.int64), np.asarray(heights, dtype=np.int64)
    out_height, out_width = out_size
    wide = widths * out_height > heights * out_width  # the image is wider than the output: its height bounds
    w = np.where(wide, np.maximum(1, heights * out_width // out_height), widths)
    h = np.where(wide, heights, np.maximum(1, widths * out_height // out_width))
    return (widths - w) // 2, (heights - h) // 2, w, h


def whole_boxes(widths, heights, out_size: tuple = None, uniforms=None, scale=None, ratio=None):
    """crop="none": the whole image."""
    widths, heights = np.asarray(widths, dtype=np.int64), np.asarray(heights, dtype=np.int64)
    return np.zeros_like(widths), np.zeros_like(heights), widths, heights


def _random_resized(widths, heights, out_size: tuple, uniforms: np.ndarray, scale, ratio):
    return random_resized_boxes(widths, heights, uniforms, scale, ratio)


# crop= rules, each (widths, heights, out_size (height, width), uniforms, scale, ratio) -> (x, y, w, h) arrays
CROPS = {"random_resized": _random_resized, "center": center_boxes, "none": whole_boxes}


def flips(uniforms: np.ndarray) -> np.ndarray:
    """Whether each sample is flipped left to right (probability 1/2), from its flip draw."""
    return uniforms[:, FLIP_DRAW] < 0.5


def draw_numbers() -> np.ndarray:
    """The draw numbers a sample uses: the crop's 4 per try, then the flip."""
    return np.arange(FLIP_DRAW + 1)

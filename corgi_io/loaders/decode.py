"""Turning a sample's payload bytes into what training code wants.

Image decoders refuse a decompression bomb before they allocate: the header gives the size,
and an image of more than `max_pixels` pixels (Pillow's own limit by default) is refused.
A decoder raises whatever its library raises; the dataset turns any failure into a
CorruptDataError that names the sample's key and shard.
"""
from __future__ import annotations

import functools
import io

import numpy as np
import torch
from PIL import Image

DEFAULT_MAX_PIXELS = Image.MAX_IMAGE_PIXELS  # Pillow's decompression-bomb limit: 89,478,485 pixels


def _pil(data: bytes, sample: dict, max_pixels: int | None = DEFAULT_MAX_PIXELS):
    image = Image.open(io.BytesIO(data))  # parses the header only; no pixel is decoded yet
    width, height = image.size
    if max_pixels is not None and width * height > max_pixels:
        raise ValueError(f"image is {width}x{height} = {width * height:,} pixels, above max_pixels={max_pixels:,}")
    return image.convert("RGB") if image.mode != "RGB" else image


def _rgb(data: bytes, sample: dict, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> torch.Tensor:
    return torch.from_numpy(np.array(_pil(data, sample, max_pixels), dtype=np.uint8))


def _text(data: bytes, sample: dict) -> str:
    return data.decode("utf-8")


DECODERS = {"pil": _pil, "rgb": _rgb, "text": _text}
IMAGE_DECODERS = ("pil", "rgb")


def get_decoder(decode, max_pixels: int | None = DEFAULT_MAX_PIXELS):
    """None (raw bytes), 'pil' (RGB PIL image), 'rgb' (uint8 HxWx3 tensor), 'text' (str), or a callable(data, sample).

    `max_pixels` bounds 'pil' and 'rgb' (None: no bound beyond Pillow's own).
    """
    if decode is None or callable(decode):
        return decode
    if decode not in DECODERS:
        raise ValueError(f"decode must be None, a callable, or one of {sorted(DECODERS)}; got {decode!r}")
    if decode in IMAGE_DECODERS:
        return functools.partial(DECODERS[decode], max_pixels=max_pixels)
    return DECODERS[decode]

"""Turning a sample's payload bytes into what training code wants."""
from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


def _pil(data: bytes, sample: dict):
    image = Image.open(io.BytesIO(data))
    return image.convert("RGB") if image.mode != "RGB" else image


def _rgb(data: bytes, sample: dict) -> torch.Tensor:
    return torch.from_numpy(np.array(_pil(data, sample), dtype=np.uint8))


def _text(data: bytes, sample: dict) -> str:
    return data.decode("utf-8")


DECODERS = {"pil": _pil, "rgb": _rgb, "text": _text}


def get_decoder(decode):
    """None (raw bytes), 'pil' (RGB PIL image), 'rgb' (uint8 HxWx3 tensor), 'text' (str), or a callable(data, sample)."""
    if decode is None or callable(decode):
        return decode
    try:
        return DECODERS[decode]
    except KeyError:
        raise ValueError(f"decode must be None, a callable, or one of {sorted(DECODERS)}; got {decode!r}") from None

"""Turning a sample's payload bytes into what training code wants.

"pil" and "rgb" decode images, "text" UTF-8 text, "video" a clip of frames (`VideoDecoder`,
PyAV, in memory), and "auto" (`AutoDecoder`) picks one of those by the sample's `kind`, for
packs that mix images, videos and texts.

Image decoders refuse a decompression bomb before they allocate: the header gives the size,
and an image of more than `max_pixels` pixels (Pillow's own limit by default) is refused.
A decoder raises whatever its library raises; the dataset turns any failure into a
CorruptDataError that names the sample's key, kind and shard.
"""
from __future__ import annotations

import dataclasses
import functools
import io

import numpy as np
import torch
from PIL import Image

from corgi_io.manifest import DEFAULT_MAX_PIXELS  # Pillow's decompression-bomb limit, also pack's

from .video import VideoDecoder


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


@dataclasses.dataclass(frozen=True)
class AutoDecoder:
    """decode= for mixed packs, by the sample's kind: image -> uint8 (H, W, 3) RGB tensor, video -> clip, text -> str.

    `video` sets the clip options (`AutoDecoder(video=VideoDecoder(frames=16))`); `max_pixels`
    bounds the images.
    """

    video: VideoDecoder = VideoDecoder()
    max_pixels: int | None = DEFAULT_MAX_PIXELS

    def for_epoch(self, seed: int, epoch: int) -> AutoDecoder:
        return dataclasses.replace(self, video=self.video.for_epoch(seed, epoch))

    def __call__(self, data: bytes, sample: dict):
        kind = sample["kind"]
        if kind == "video":
            return self.video(data, sample)
        return _rgb(data, sample, self.max_pixels) if kind == "image" else _text(data, sample)


DECODERS = {"pil": _pil, "rgb": _rgb, "text": _text}
IMAGE_DECODERS = ("pil", "rgb")
NAMES = sorted([*DECODERS, "video", "auto"])


def get_decoder(decode, max_pixels: int | None = DEFAULT_MAX_PIXELS):
    """None (raw bytes), 'pil' (RGB PIL image), 'rgb' (uint8 HxWx3 tensor), 'text' (str),
    'video' (uint8 TxHxWx3 tensor of 8 frames: `VideoDecoder`), 'auto' (by kind: `AutoDecoder`),
    or a callable(data, sample), such as `VideoDecoder(frames=16, clip="random")`.

    `max_pixels` bounds 'pil', 'rgb', and the frames x H x W of a 'video' clip (None: no bound
    beyond Pillow's own).
    """
    if decode is None or callable(decode):
        return decode
    if decode == "video":
        return VideoDecoder(max_pixels=max_pixels)
    if decode == "auto":
        return AutoDecoder(VideoDecoder(max_pixels=max_pixels), max_pixels)
    if decode not in DECODERS:
        raise ValueError(f"decode must be None, a callable, or one of {NAMES}; got {decode!r}")
    if decode in IMAGE_DECODERS:
        return functools.partial(DECODERS[decode], max_pixels=max_pixels)
    return DECODERS[decode]


def epoch_decoder(decode, seed: int, epoch: int):
    """The decoder to use this epoch: `decode.for_epoch(seed, epoch)` where it has one (random clips), else `decode`."""
    for_epoch = getattr(decode, "for_epoch", None)
    return decode if for_epoch is None else for_epoch(seed, epoch)

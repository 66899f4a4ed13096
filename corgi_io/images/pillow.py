"""Pillow's decode of any image format to RGB, with corgi's decompression-bomb bound checked from the header.

An image of more than `max_pixels` pixels (Pillow's own limit by default) is refused with a
DecodeError before any pixel is decoded.  `max_pixels` is then the only bound: Pillow's own
check, a warning above its `Image.MAX_IMAGE_PIXELS` and an error above twice that, is silenced (so
raising `max_pixels` raises the bound, without a warning per image); with `max_pixels=None`,
Pillow's check applies.  No torch here: the loaders' decoders and `corgi_io.images.fused` share it.
"""
from __future__ import annotations

import io
import warnings

from PIL import Image

from corgi_io.errors import DecodeError
from corgi_io.manifest import DEFAULT_MAX_PIXELS


def _open_unchecked(data: bytes):
    """`Image.open` of `data` without Pillow's pixel check (None if no format opens it): Pillow's registry
    (`Image.ID`, `Image.OPEN`), for an image Pillow refuses as a bomb while `max_pixels` allows it."""
    Image.init()
    for name in Image.ID:
        factory, accept = Image.OPEN[name]
        verdict = accept(data[:16]) if accept else True
        if verdict and not isinstance(verdict, str):
            try:
                return factory(io.BytesIO(data), "")
            except (SyntaxError, IndexError, TypeError, ValueError):
                continue
    return None


def check_pixels(width: int, height: int, max_pixels: int | None) -> None:
    """DecodeError for an image of `width` x `height` above `max_pixels` (None: no bound)."""
    if max_pixels is not None and width * height > max_pixels:
        raise DecodeError(f"image is {width}x{height} = {width * height:,} pixels, above max_pixels={max_pixels:,}")


def open_header(data: bytes, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """`data` opened by Pillow, its header parsed and no pixel decoded; DecodeError above `max_pixels`."""
    with warnings.catch_warnings():
        if max_pixels is not None:
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError:
            image = None if max_pixels is None else _open_unchecked(data)
            if image is None:
                raise
    check_pixels(*image.size, max_pixels)
    return image


def open_image(data: bytes, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """The decoded RGB image in `data`; DecodeError for one above `max_pixels`, from its header (see the module)."""
    image = open_header(data, max_pixels)
    with warnings.catch_warnings():
        if max_pixels is not None:
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image.load()  # here, so that a broken body fails in the decoder, not later in a transform
    return image if image.mode == "RGB" else image.convert("RGB")

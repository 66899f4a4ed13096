"""Pillow's decode of any image format to RGB, with corgi's decompression-bomb bound checked from the header.

An image of more than `max_pixels` pixels (Pillow's own limit by default), counted from its header as
`corgi pack` counts them (`corgi_io.images.header`), is refused with a DecodeError before any pixel is
decoded.  `max_pixels` is then the only bound: Pillow's own check, a warning above its
`Image.MAX_IMAGE_PIXELS` and an error above twice that, is silenced (so raising `max_pixels` raises the
bound, without a warning per image); with `max_pixels=None`, Pillow's check applies.

Depth: an image of more than 8 bits a channel is scaled to 8 bits, never clipped (`eight_bits`): a 16-bit
one (Pillow's I;16 modes: a 16-bit grayscale PNG or TIFF) from 0-65535 to 0-255; a 32-bit integer or float
one (modes I and F), which has no fixed range, from its own lowest to its highest finite value; a flat one
(one finite value) is that value clipped to 0-255, and one without a finite value black.  Pillow reads a
16-bit RGB(A) PNG as 8-bit RGB(A) itself.  The pack's resize uses `eight_bits` too.

No torch here: the loaders' decoders and `corgi_io.images.fused` share it.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image

from corgi_io.errors import DecodeError
from corgi_io.images.header import above_pixel_limit, image_size, open_unbounded
from corgi_io.manifest import DEFAULT_MAX_PIXELS

SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")  # values 0-65535
WIDE_MODES = ("I", "F")  # int32 and float32: no fixed range


def check_pixels(width: int, height: int, max_pixels: int | None) -> None:
    """DecodeError for an image of `width` x `height` above `max_pixels` (None: no bound; `above_pixel_limit`)."""
    if above_pixel_limit(width * height, max_pixels):
        raise DecodeError(f"image is {width}x{height} = {width * height:,} pixels, above max_pixels={max_pixels:,}")


def open_header(data: bytes, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """`data` opened by Pillow, its header parsed and no pixel decoded; DecodeError above `max_pixels`, counted
    from `image_size` as `corgi pack` counts them (None: Pillow's own check instead)."""
    if max_pixels is None:
        return Image.open(io.BytesIO(data))
    image = open_unbounded(data)
    check_pixels(*image_size(data, image), max_pixels)
    return image


def open_image(data: bytes, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """The decoded RGB image in `data`; DecodeError for one above `max_pixels`, from its header (see the module)."""
    image = open_header(data, max_pixels)
    with warnings.catch_warnings():
        if max_pixels is not None:
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image.load()  # here, so that a broken body fails in the decoder, not later in a transform
    image = eight_bits(image)
    return image if image.mode == "RGB" else image.convert("RGB")


def eight_bits(image: Image.Image) -> Image.Image:
    """`image` as mode L when it has more than 8 bits a pixel (see the module: scaled, so that its levels
    keep their order and spread over 0-255; Pillow's own conversion clips, which turned a 16-bit gradient
    into two levels); any other image unchanged."""
    if image.mode not in SIXTEEN_BIT_MODES + WIDE_MODES:
        return image
    values = np.array(image, dtype=np.float32)  # a copy of its own: the scaling below works in place
    if image.mode in SIXTEEN_BIT_MODES:
        low, high = 0.0, 65535.0
    else:
        finite = np.isfinite(values)
        low = float(np.min(values, where=finite, initial=np.inf))
        high = float(np.max(values, where=finite, initial=-np.inf))
        if not high > low:
            return _flat(image.size, high)
        np.nan_to_num(values, copy=False, nan=low, posinf=high, neginf=low)
    values -= low
    values *= 255.0 / (high - low)
    return Image.fromarray(np.rint(values, out=values).astype(np.uint8))


def _flat(size: tuple, value: float) -> Image.Image:
    """A mode L image of `size` for an I or F image whose only finite value is `value` (-inf: it has none): that
    value rounded and clipped to 0-255, so that a flat level of 0-255 keeps it (above is white, below black);
    black without one.  There is no range to scale, and black for every flat image hid a white or grey one."""
    level = int(np.clip(np.rint(value), 0, 255)) if np.isfinite(value) else 0
    return Image.new("L", size, level)

"""An image's header, read one way for `corgi pack` and the loaders alike: its size and the one pixel limit.

`image_size` reads JPEG and PNG sizes straight from the bytes (the start-of-frame segment, the IHDR chunk:
about 2 us, against 12 us for `imagesize` and 28 us for Pillow: bench/pack.py's profile) and asks Pillow
for every other format, and for any JPEG whose markers do not lead to a frame header.  Pillow's own
decompression-bomb check (a warning above `Image.MAX_IMAGE_PIXELS`, an error above twice that) is not
applied to the header (`open_unbounded`): `above_pixel_limit` is the only bound, so that the pack and the
loader refuse the same images for the same `max_pixels`, above Pillow's limit too.
"""
from __future__ import annotations

import io
import warnings

from PIL import Image

JPEG_MAGIC = b"\xff\xd8"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn markers (not DHT, JPG, DAC)
JPEG_STANDALONE = frozenset([0x01, 0xD8, *range(0xD0, 0xD8)])  # TEM, SOI, RSTn: no length field


def above_pixel_limit(pixels: int, max_pixels: int | None) -> bool:
    """The one pixel limit of pack and load: an image of more than `max_pixels` pixels is refused (None: no limit)."""
    return max_pixels is not None and pixels > max_pixels


def image_size(data: bytes, opened: Image.Image | None = None) -> tuple:
    """(width, height) of the encoded image in `data`, from its header alone (see the module); `opened`: `data`
    already opened by Pillow, asked instead of opening it again.  Pillow's errors for a header it cannot read."""
    found = _jpeg_size(data) if data[:2] == JPEG_MAGIC else _png_size(data) if data[:8] == PNG_MAGIC else None
    if found is not None:
        return found
    if opened is not None:
        return opened.size
    with open_unbounded(data) as image:
        return image.size


def open_unbounded(data: bytes) -> Image.Image:
    """`data` opened by Pillow, its header parsed and no pixel decoded, without Pillow's pixel check (see the
    module); the caller bounds it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data))
        except Image.DecompressionBombError:
            image = _open_unchecked(data)
            if image is None:
                raise
            return image


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


def _jpeg_size(data: bytes):
    """(width, height) from a JPEG's first start-of-frame segment, walking the marker segments that
    precede it (a thumbnail inside APP1 is skipped whole); None if they do not lead to one."""
    position, end = 2, len(data) - 9
    while position < end:
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker in JPEG_FRAMES:
            return (int.from_bytes(data[position + 7:position + 9], "big"),
                    int.from_bytes(data[position + 5:position + 7], "big"))
        if marker == 0xFF:  # a fill byte before a marker
            position += 1
        elif marker in JPEG_STANDALONE:
            position += 2
        else:
            position += 2 + int.from_bytes(data[position + 2:position + 4], "big")
    return None


def _png_size(data: bytes):
    """(width, height) from a PNG's IHDR chunk, the first one; None if it is not there."""
    if data[12:16] != b"IHDR" or len(data) < 24:
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")

"""Pack and load read an image's header one way and bound it by one pixel limit (issue 30): for the same
`max_pixels` the pack's size probe, the pack's resize, the loaders' Pillow decoders and the fused decoder refuse
the same images, above Pillow's own `Image.MAX_IMAGE_PIXELS` (and twice it, where Pillow raises) too.  (The
resize names every image field "png": its kind is all it reads from the name.)"""
from __future__ import annotations

import io
import struct
import warnings

import pytest
from PIL import Image

from corgi_io.errors import BadInput, DecodeError
from corgi_io.images.fused import image_header
from corgi_io.images.pillow import open_header
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sizing import probe_size
from corgi_io.packing.transforms.image import ImageResize
from helpers.corpus_factory import png_claiming

SIDES = {
    "pack: size probe": lambda data, limit: probe_size("image", None, data, None, limit),
    "pack: resize": lambda data, limit: ImageResize(1 << 16, max_pixels=limit)(PackSample("k", 0, {"png": data})),
    "load: pillow": open_header,
    "load: fused": image_header,
}


def claiming(fmt: str, width: int, height: int) -> bytes:
    """A small `fmt` image whose header claims `width` x `height` (its pixels are never decoded here)."""
    if fmt == "PNG":
        return png_claiming(width, height)
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, format=fmt)
    data = bytearray(out.getvalue())
    if fmt == "JPEG":
        frame = data.index(b"\xff\xc0")
        data[frame + 5:frame + 9] = struct.pack(">HH", height, width)
    elif fmt == "GIF":  # the logical screen and the first frame
        data[6:10] = struct.pack("<HH", width, height)
        frame = data.index(b"\x2c", 13)
        data[frame + 5:frame + 9] = struct.pack("<HH", width, height)
    else:  # BMP
        data[18:26] = struct.pack("<ii", width, height)
    return bytes(data)


def verdict(side, data: bytes, max_pixels: int) -> str:
    """"kept" or "refused" (BadInput or DecodeError naming the pixels); anything else, a warning too, fails."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            side(data, max_pixels)
        except (BadInput, DecodeError) as exc:
            assert "pixels" in str(exc), str(exc)
            return "refused"
    return "kept"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP"])
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("width, height", [(8, 8), (11_000, 11_000), (15_000, 15_000)])
def test_pack_and_load_refuse_the_same_images(fmt, side, width, height):
    data, pixels = claiming(fmt, width, height), width * height
    assert [verdict(SIDES[side], data, limit) for limit in (pixels - 1, pixels)] == ["refused", "kept"]


def test_the_sizes_tried_straddle_pillows_limits():
    assert 64 < Image.MAX_IMAGE_PIXELS < 11_000 ** 2 < 2 * Image.MAX_IMAGE_PIXELS < 15_000 ** 2

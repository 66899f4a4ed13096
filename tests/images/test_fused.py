"""The fused decode-crop-resize stays within a few grey levels of Pillow doing the same crop and resize, with and
without DCT scaling, for every JPEG decoder, and refuses an oversized image before decoding a pixel."""
from __future__ import annotations

import io
import resource
import struct

import numpy as np
import pytest
from PIL import Image

from corgi_io import DecodeError
from corgi_io.images.fused import JPEG_DECODERS, dct_reduction, decode_crop_resize, default_jpeg_decoder, image_header
from helpers.corpus_factory import png_claiming

OUT = (224, 224, 3)
DECODERS = sorted(name for name in JPEG_DECODERS if name != "simplejpeg" or default_jpeg_decoder() == "simplejpeg")


def photo(width: int, height: int, fmt: str = "JPEG", mode: str = "RGB", seed: int = 0) -> bytes:
    """A smooth colour field with mild grain, like a photo: what JPEG codes well."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (height // 40 + 2, width // 40 + 2, 3), dtype=np.uint8))
    pixels = np.asarray(coarse.resize((width, height), Image.BICUBIC), dtype=np.int16)
    pixels = np.clip(pixels + rng.integers(-6, 7, pixels.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, format=fmt, quality=92)
    return out.getvalue()


def pillow_reference(data: bytes, box: tuple, size=OUT[:2]) -> np.ndarray:
    """Pillow decoding at full size, then its (antialiased) bilinear resize of the box."""
    x, y, w, h = box
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return np.asarray(image.resize(size[::-1], Image.BILINEAR, box=(x, y, x + w, y + h)), dtype=np.int16)


def fused(data: bytes, box: tuple, decoder: str = default_jpeg_decoder(), flip: bool = False, out_shape=OUT) -> np.ndarray:
    out = np.empty(out_shape, dtype=np.uint8)
    assert decode_crop_resize(data, lambda w, h: box, out, flip, max_pixels=None, jpeg_decoder=decoder) is out
    return out.astype(np.int16)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("width,height", [(500, 375), (375, 500), (1600, 1200)])
def test_whole_and_centre_crops_match_pillow(decoder, width, height):
    data = photo(width, height)
    side = min(width, height)
    for box in ((0, 0, width, height), ((width - side) // 2, (height - side) // 2, side, side)):
        error = np.abs(fused(data, box, decoder) - pillow_reference(data, box)).mean()
        assert error <= 2.0, (box, error)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("box,reduction", [((100, 80, 1000, 900), 4), ((0, 0, 500, 460), 2),
                                           ((700, 300, 900, 900), 4), ((10, 20, 1590, 1180), 4)])
def test_dct_scaled_crops_keep_the_geometry(decoder, box, reduction):
    data = photo(1600, 1200, seed=3)
    assert dct_reduction(box[2], box[3], 224, 224) == reduction
    ours, reference = fused(data, box, decoder), pillow_reference(data, box)
    assert np.abs(ours - reference).mean() <= 3.0
    x, y, w, h = box
    shifted = pillow_reference(data, (x + w // 8, y, w - w // 8, h))  # a box an eighth narrower: visibly worse
    assert np.abs(ours - reference).mean() < np.abs(ours - shifted).mean()


def test_flip_mirrors_the_row():
    data = photo(500, 375)
    box = (50, 40, 300, 250)
    assert np.array_equal(fused(data, box, flip=True), fused(data, box)[:, ::-1])


def test_non_square_outputs_and_small_crops_upscale():
    data = photo(500, 375)
    out = fused(data, (10, 10, 50, 40), out_shape=(96, 128, 3))
    assert np.abs(out - pillow_reference(data, (10, 10, 50, 40), size=(96, 128))).mean() <= 2.0


@pytest.mark.parametrize("fmt,mode", [("PNG", "RGB"), ("PNG", "RGBA"), ("WEBP", "RGB"), ("JPEG", "L"),
                                      ("JPEG", "CMYK")])
def test_other_formats_and_colour_spaces_fall_back_to_pillow(fmt, mode):
    data = photo(320, 240, fmt=fmt, mode=mode)
    box = (20, 10, 200, 200)
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize((224, 224), Image.BILINEAR,
                                                                                box=(20, 10, 220, 210)), np.int16)
    assert np.abs(fused(data, box) - reference).mean() <= 2.0


def jpeg_claiming(width: int, height: int) -> bytes:
    """A small real JPEG whose frame header (SOF0) is rewritten to claim width x height."""
    data = bytearray(photo(16, 16))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


@pytest.mark.parametrize("data", [jpeg_claiming(30000, 30000), png_claiming(30000, 30000)], ids=["jpeg", "png"])
def test_max_pixels_refuses_before_any_pixel_is_decoded(data):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = np.empty(OUT, dtype=np.uint8)
    with pytest.raises(DecodeError, match="30000x30000 = 900,000,000 pixels, above max_pixels=89,478,485"):
        decode_crop_resize(data, lambda w, h: (0, 0, w, h), out, False, max_pixels=89_478_485)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 100  # decoding: 2.7 GB
    assert image_header(data, 10**9)[:2] == (30000, 30000)


def test_dct_reduction_never_undershoots_the_output():
    for w in range(1, 2000, 37):
        for h in range(1, 2000, 41):
            factor = dct_reduction(w, h, 224, 160)
            assert factor in (1, 2, 4, 8)
            assert factor == 1 or (w / factor >= 224 and h / factor >= 160)
            assert factor == 8 or not (w / (2 * factor) >= 224 and h / (2 * factor) >= 160)

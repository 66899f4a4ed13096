"""A flat 32-bit image (modes I and F: no range to scale) maps to its own value clipped to 0-255 (issue 28 review):
every flat one was black, a white 16-bit PGM and a grey float TIFF alike."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from corgi_io.images.pillow import open_image
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.image import ImageResize


def tiff(value, dtype) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((4, 6), value, dtype)).save(out, format="TIFF")
    return out.getvalue()


@pytest.mark.parametrize("value, dtype, level", [(100, np.int32, 100), (65535, np.int32, 255), (-5, np.int32, 0),
                                                 (37.6, np.float32, 38), (1e9, np.float32, 255),
                                                 (np.nan, np.float32, 0), (np.inf, np.float32, 0)])
def test_a_flat_deep_image_is_its_value_clipped_to_8_bits(value, dtype, level):
    data = tiff(value, dtype)
    assert Image.open(io.BytesIO(data)).mode == ("I" if dtype is np.int32 else "F")
    decoded = np.asarray(open_image(data))
    assert decoded.shape == (4, 6, 3) and (decoded == level).all()
    kept = ImageResize(2)(PackSample("k", 0, {"tif": data}))
    assert (np.asarray(Image.open(io.BytesIO(kept.sample.fields["tif"]))) == level).all()


def test_a_flat_image_with_non_finite_pixels_is_its_finite_value():
    pixels = np.full((4, 6), 200.0, np.float32)
    pixels[0, :3] = np.nan, np.inf, -np.inf
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="TIFF")
    assert (np.asarray(open_image(out.getvalue())) == 200).all()

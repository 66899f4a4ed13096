"""Pillow's floor in pyproject.toml admits no version that opens a 16-bit grayscale PNG as mode I: eight_bits
scales I;16 from 0-65535 but stretches I from its own range, so on 10.0-10.2 such a PNG was stretched."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from PIL import Image

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def test_the_pillow_floor_is_the_first_release_that_opens_16_bit_gray_png_as_i16():
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (pillow,) = [Requirement(text) for text in dependencies if Requirement(text).name.lower() == "pillow"]
    assert "10.2.1" not in pillow.specifier and "10.3.0" in pillow.specifier
    out = io.BytesIO()
    Image.fromarray(np.full((2, 2), 40000, np.uint16)).save(out, format="PNG")
    assert Image.open(out).mode == "I;16"  # the installed Pillow, within the floor

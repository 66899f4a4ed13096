"""Smoke test of bench/resized_decode.py: a small run prints one line per pack with its ratio, and the target;
and its Pillow RandomResizedCrop draws boxes inside the image, as torchvision does."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "resized_decode.py"


def load_bench():
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    spec = importlib.util.spec_from_file_location("resized_decode_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_crop_boxes_lie_inside_the_image_and_keep_torchvision_ranges():
    crop = load_bench().RandomResizedCropFlip(176, seed=1)
    for width, height in [(500, 375), (375, 500), (20, 300)]:
        for _ in range(200):
            left, top, right, bottom = crop.box(width, height)
            assert 0 <= left < right <= width and 0 <= top < bottom <= height
            w, h = right - left, bottom - top
            assert 0.08 * width * height * 0.9 <= w * h or (w, h) == (min(width, height),) * 2


def test_crop_gives_a_uint8_square_of_the_size():
    from PIL import Image

    tensor = load_bench().RandomResizedCropFlip(32)(Image.new("RGB", (500, 375), (10, 20, 30)))
    assert tuple(tensor.shape) == (32, 32, 3) and str(tensor.dtype) == "torch.uint8"
    assert tensor[0, 0].tolist() == [10, 20, 30]


@pytest.mark.slow
def test_resized_decode_bench_small_run(tmp_path):
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    result = subprocess.run([sys.executable, BENCH, "--n", "12", "--rounds", "1", "--workdir", tmp_path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    comment, original, resized, target = result.stdout.splitlines()
    assert comment.startswith("# 12 JPEGs, CorgiPileDataset(decode='pil'") and "median of 1 interleaved" in comment
    pattern = r"resized-decode {} +[\d.]+ images/s ratio +[\d.]+x vs the original pack \(500x375\)"
    assert re.fullmatch(pattern.format(r"original pack \(500x375\)"), original) and " 1.00x " in original
    assert re.fullmatch(pattern.format("pack resized to 256"), resized)
    assert re.fullmatch(r"target pack resized to 256 vs original pack \(500x375\): +[\d.]+x "
                        r"\(target >= 2.0x: (met|NOT met)\)", target)

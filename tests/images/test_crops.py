"""Crop geometry is pure and per sample: boxes lie inside their image, follow torchvision's RandomResizedCrop
rules, and depend only on (seed, epoch, sample index)."""
from __future__ import annotations

import math
import random

import numpy as np
from hypothesis import given, settings, strategies as st

from corgi_io.images.crops import (CROPS, TRIES, center_boxes, draw_numbers, flips, random_resized_boxes,
                                   sample_uniforms)

SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
sides = st.integers(1, 5000)


def boxes(crop: str, widths, heights, out=(224, 224), seed=0, epoch=0, indices=None):
    indices = np.arange(len(widths)) if indices is None else indices
    uniforms = sample_uniforms(seed, epoch, indices, draw_numbers())
    return np.stack(CROPS[crop](widths, heights, out, uniforms, SCALE, RATIO))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(sides, sides), min_size=1, max_size=40), st.sampled_from(sorted(CROPS)),
       st.integers(0, 2**32), st.integers(0, 1000))
def test_every_box_lies_inside_its_image(shapes, crop, seed, epoch):
    widths, heights = np.array(shapes).T
    x, y, w, h = boxes(crop, widths, heights, seed=seed, epoch=epoch)
    assert (w >= 1).all() and (h >= 1).all() and (x >= 0).all() and (y >= 0).all()
    assert (x + w <= widths).all() and (y + h <= heights).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=30, unique=True), st.integers(0, 2**32))
def test_a_sample_draws_the_same_whatever_its_company(indices, seed):
    together = sample_uniforms(seed, 3, indices, draw_numbers())
    alone = np.concatenate([sample_uniforms(seed, 3, [i], draw_numbers()) for i in reversed(indices)])[::-1]
    assert np.array_equal(together, alone)
    assert ((together >= 0) & (together < 1)).all()


def test_draws_change_with_seed_epoch_and_index():
    base = sample_uniforms(0, 0, [5], draw_numbers())
    for other in (sample_uniforms(1, 0, [5], draw_numbers()), sample_uniforms(0, 1, [5], draw_numbers()),
                  sample_uniforms(0, 0, [6], draw_numbers())):
        assert not np.array_equal(base, other)


def test_draws_are_uniform_and_flips_are_fair():
    uniforms = sample_uniforms(7, 2, np.arange(20_000), draw_numbers())
    histogram, _ = np.histogram(uniforms, bins=10, range=(0, 1))
    assert np.abs(histogram / uniforms.size - 0.1).max() < 0.005
    assert abs(flips(uniforms).mean() - 0.5) < 0.015


def torchvision_box(width: int, height: int, rng: random.Random) -> tuple:
    """torchvision.transforms.RandomResizedCrop.get_params, transcribed with Python's random."""
    area = width * height
    for _ in range(TRIES):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    ratio = width / height
    w, h = (width, round(width / RATIO[0])) if ratio < RATIO[0] else \
        (round(height * RATIO[1]), height) if ratio > RATIO[1] else (width, height)
    return (width - w) // 2, (height - h) // 2, w, h


def test_random_resized_boxes_follow_torchvision_in_distribution():
    widths, heights = np.full(20_000, 500), np.full(20_000, 375)
    x, y, w, h = boxes("random_resized", widths, heights)
    rng = random.Random(0)
    reference = np.array([torchvision_box(500, 375, rng) for _ in range(20_000)]).T
    for ours, theirs in zip((w * h, w / h, x + w / 2, y + h / 2), (reference[2] * reference[3],
                            reference[2] / reference[3], reference[0] + reference[2] / 2, reference[1] + reference[3] / 2)):
        assert abs(np.mean(ours) - np.mean(theirs)) < 0.03 * np.std(theirs) + 1e-9
        assert abs(np.std(ours) - np.std(theirs)) < 0.05 * np.std(theirs)


def test_boxes_that_fit_keep_the_scale_and_ratio_ranges():
    x, y, w, h = boxes("random_resized", np.full(5000, 800), np.full(5000, 600))
    share, aspect = w * h / (800 * 600), w / h
    assert share.min() > SCALE[0] * 0.9 and share.max() <= 1.0
    assert aspect.min() > RATIO[0] * 0.97 and aspect.max() < RATIO[1] * 1.03


def test_an_image_too_thin_for_any_try_gets_the_clamped_centre():
    # 1000x10: every try's box is too tall or too wide, so torchvision's fallback applies: the ratio clamped to 4/3
    u = np.full((1, len(draw_numbers())), 0.99)
    x, y, w, h = random_resized_boxes([1000], [10], u, SCALE, RATIO)
    assert (int(w[0]), int(h[0])) == (13, 10) and int(x[0]) == (1000 - 13) // 2 and int(y[0]) == 0


def test_center_boxes_are_the_largest_centred_box_of_the_output_ratio():
    x, y, w, h = center_boxes([500, 375, 300], [375, 500, 300], (224, 224))
    assert w.tolist() == h.tolist() == [375, 375, 300]
    assert x.tolist() == [62, 0, 0] and y.tolist() == [0, 62, 0]
    x, y, w, h = center_boxes([400], [400], (100, 200))  # an output twice as wide as tall
    assert (int(w[0]), int(h[0]), int(x[0]), int(y[0])) == (400, 200, 0, 100)

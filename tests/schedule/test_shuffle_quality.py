"""Shuffle quality as a number (issue 32 §4): MosaicML's gap entropy, against a full shuffle, from the plan alone."""
from __future__ import annotations

import numpy as np
import pytest

from corgi_io.report.plan import summarize
from corgi_io.schedule.shuffle_quality import gap_entropy, shuffle_quality

N, BLOCK = 20_000, 64
FIRST = np.arange(0, N, BLOCK)


def test_an_unshuffled_order_has_no_entropy_and_a_constant_stride_none_either():
    assert gap_entropy(np.arange(1000)) == 0.0 and gap_entropy(np.arange(0, 9000, 9)) == 0.0
    assert gap_entropy(np.array([5])) == 0.0


def test_two_gaps_equally_often_are_one_bit():
    assert gap_entropy(np.array([0, 1, 3, 4, 6, 7, 9])) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_full_shuffle_scores_about_one_and_stored_order_zero(seed):
    rng = np.random.default_rng(100 + seed)
    full = rng.choice(N, size=N // 8, replace=False)
    assert shuffle_quality(full, FIRST, N, seed)["ratio"] == pytest.approx(1.0, abs=0.05)
    assert shuffle_quality(np.arange(N // 8), FIRST, N, seed)["ratio"] < 0.01  # block gaps: 0, and 1 per block


def test_corgipile_quality_grows_with_buffer_blocks_in_corgi_plan():
    sizes = np.ones(N, np.int64)
    count = np.full(len(FIRST), BLOCK)
    count[-1] = N - FIRST[-1]
    ratios = [summarize(FIRST, count, sizes, 8, buffer_blocks=b, seed=3)["shuffle"]["ratio"] for b in (1, 4, 16, 64)]
    assert ratios == sorted(ratios) and ratios[0] < 0.6 and ratios[-1] > 0.9, ratios

"""Blend weights at the extremes of float64 (issue 28, defect 11): normalised without overflow, quotas exact.

Weights of 1e308 summed to inf, so every normalised weight became 0 and the epoch shrank to one sample a
source (a 2-sample epoch of a 2-source blend, in `corgi plan` and in CorgiPileDataset alike).
"""
from __future__ import annotations

import json
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.errors import ArgumentError
from corgi_io.schedule.blend import MAX_EPOCH_SAMPLES, check_weights, epoch_quotas
from helpers.packs import text_pack

HUGE = 1e308


def normalised(names, weights) -> np.ndarray:
    """check_weights with every numpy warning (an overflow) turned into a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return check_weights(names, weights)


@pytest.mark.parametrize("weights, expected", [
    ([HUGE, HUGE], [0.5, 0.5]), ([HUGE, HUGE, HUGE, HUGE], [0.25] * 4), ([HUGE, 1.0], [1.0, 1e-308]),
    ([1.7976931348623157e308, 1.7976931348623157e308], [0.5, 0.5]), ([5e-324, 5e-324], [0.5, 0.5]),
    ([3e-300, 1e-300], [0.75, 0.25]),
])
def test_extreme_weights_normalise_without_overflow(weights, expected):
    names = [f"s{i}" for i in range(len(weights))]
    assert normalised(names, weights).tolist() == pytest.approx(expected, rel=1e-15, abs=1e-320)


@pytest.mark.parametrize("weights, message", [
    ([float("inf"), 1], "finite"), ([float("-inf"), 1], "finite"), ([float("nan"), 1], "finite"),
    ([-1e-300, 1], "non-negative"), ([0.0, -0.0], "not all zero"), ([10 ** 400, 1], "finite"),
    (["1", 1], "numbers"), ([True, 1], "numbers"), ([None, 1], "numbers"), ([[1], 1], "numbers"),
])
def test_bad_weights_are_refused_with_one_line(weights, message):
    with pytest.raises(ArgumentError, match=message) as caught:
        normalised(["a", "b"], weights)
    assert "\n" not in str(caught.value)


extreme = st.one_of(st.just(0.0), st.floats(1e-300, HUGE), st.sampled_from([1e-300, 1e308, 1.0, 5e-324]))


@settings(max_examples=400, deadline=None)
@given(st.lists(extreme, min_size=1, max_size=6).filter(any), st.integers(1, MAX_EPOCH_SAMPLES))
def test_quotas_of_extreme_weights_fill_the_epoch_and_keep_each_share(weights, samples_per_epoch):
    """Each normalised weight is its exact share to float precision, the quotas sum to samples_per_epoch, and
    each quota is within one sample of its exact share of the normalised weights (the documented bound)."""
    names = [f"s{i}" for i in range(len(weights))]
    w = normalised(names, weights)
    exact = [Fraction(x) / sum(map(Fraction, weights)) for x in weights]
    assert np.all(np.isfinite(w)) and abs(float(w.sum()) - 1) < 1e-12
    assert all(abs(Fraction(float(a)) - b) <= Fraction(1, 10 ** 15) for a, b in zip(w, exact))
    quotas = epoch_quotas(w, samples_per_epoch)
    assert quotas.dtype == np.int64 and int(quotas.sum()) == samples_per_epoch and np.all(quotas >= 0)
    total = sum(map(Fraction, w.tolist()))
    assert all(abs(int(q) - Fraction(x) * samples_per_epoch / total) < 1 for q, x in zip(quotas, w.tolist()))


@pytest.mark.parametrize("samples", [-1, MAX_EPOCH_SAMPLES + 1, 10 ** 30, 2.0, True])
def test_an_epoch_length_out_of_range_is_refused(samples):
    with pytest.raises(ArgumentError, match="samples per epoch"):
        epoch_quotas(np.array([0.5, 0.5]), samples)


@pytest.fixture(scope="module")
def two_packs(tmp_path_factory):
    return [text_pack(tmp_path_factory, f"w{i}", [3] * 50, stem=f"p{i}_") for i in range(2)]


def test_corgi_plan_with_huge_weights_keeps_the_epoch(two_packs, corgi):
    result = corgi("plan", *two_packs, "--weights", "1e308,1e308", "--world-size", 2, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["samples_per_epoch"] == 100 and [s["quota"] for s in summary["sources"]] == [50, 50]
    assert "Warning" not in result.stderr


@pytest.mark.parametrize("weights, message", [("inf,1", "finite"), ("1e999,1", "finite"), ("nan,1", "finite"),
                                              ("-1,1", "non-negative"), ("0,0", "not all zero")])
def test_corgi_plan_refuses_bad_weights_with_one_line(two_packs, corgi, weights, message):
    result = corgi("plan", *two_packs, "--weights", weights, "--world-size", 2)
    assert result.exit_code != 0 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_dataset_blend_with_huge_weights_reads_the_whole_epoch(two_packs):
    from corgi_io.loaders import Blend, CorgiPileDataset

    packs = dict(zip("ab", map(str, two_packs)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ds = CorgiPileDataset(Blend(packs, weights={"a": HUGE, "b": HUGE}))
        sources = [sample["source"] for sample in ds]
    assert len(sources) == 100 and sources.count("a") == sources.count("b") == 50

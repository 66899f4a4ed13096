"""SizeFilter: inclusive bounds, a Drop with its reason per sample, and the same rule over a column."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from corgi_io.errors import PackError
from corgi_io.packing.transforms.chain import Drop
from corgi_io.packing.transforms.filters import SizeFilter

BOUND = st.one_of(st.none(), st.integers(0, 50))


def test_bounds_are_inclusive_and_a_drop_says_which():
    size_filter = SizeFilter(10, 20)
    assert [size_filter.keep(s) for s in (9, 10, 20, 21)] == [False, True, True, False]
    assert size_filter.check("k", 15) is None
    assert size_filter.check("k", 9) == Drop("k", "size 9 below min_size 10")
    assert size_filter.check("k", 25_000) == Drop("k", "size 25,000 above max_size 20")


def test_a_missing_bound_is_no_bound():
    assert SizeFilter().keep(0) and SizeFilter(max_size=5).keep(0) and SizeFilter(min_size=5).keep(10**12)


@given(BOUND, BOUND, st.lists(st.integers(0, 60), max_size=30))
def test_the_column_mask_follows_the_per_sample_rule(low, high, sizes):
    if low is not None and high is not None and low > high:
        low, high = high, low
    size_filter = SizeFilter(low, high)
    assert size_filter.mask(np.array(sizes, dtype=np.int64)).tolist() == [size_filter.keep(s) for s in sizes]


@pytest.mark.parametrize("low, high", [(5, 4), (-1, None), (None, 2.5), (True, None)])
def test_bad_bounds_are_pack_errors(low, high):
    with pytest.raises(PackError, match="size_filter: "):
        SizeFilter(low, high)


def test_it_pickles_and_records_its_options():
    size_filter = SizeFilter(1, None)
    assert pickle.loads(pickle.dumps(size_filter)) == size_filter
    assert size_filter.options() == {"min_size": 1, "max_size": None}

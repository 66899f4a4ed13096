"""Exact dedup: the worker's 128-bit hash and the driver's first-occurrence plan, against a set-based reference."""
from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.errors import BadInput
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.dedup import (ExactDedup, content_hash, first_occurrences, first_occurrences_chunked,
                                               hashes_of)

UINT64 = st.integers(0, 2**64 - 1)


def reference(rows) -> list:
    """Keep a row when no earlier row equals it: the plain set-based answer."""
    seen, keep = set(), []
    for row in rows:
        keep.append(tuple(row) not in seen)
        seen.add(tuple(row))
    return keep


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=60))
def test_first_occurrences_equals_the_reference_on_crowded_hashes(rows):
    """Few distinct values: equal first halves with unequal second halves (the lexsort path) are frequent."""
    assert first_occurrences(np.array(rows, dtype=np.uint64).reshape(-1, 2)).tolist() == reference(rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(UINT64, UINT64), max_size=40), st.data())
def test_first_occurrences_equals_the_reference_on_full_range_hashes_with_repeats(distinct, data):
    rows = [data.draw(st.sampled_from(distinct)) for _ in range(data.draw(st.integers(0, 80)))] if distinct else []
    assert first_occurrences(np.array(rows, dtype=np.uint64).reshape(-1, 2)).tolist() == reference(rows)


def test_an_equal_first_half_alone_is_not_a_duplicate():
    hashes = np.array([[1, 1], [1, 2], [1, 1], [0, 2], [1, 2]], dtype=np.uint64)
    assert first_occurrences(hashes).tolist() == [True, True, False, True, False]


def test_the_worker_hash_is_blake2b_128_of_the_primary_field():
    sample = PackSample("k", 0, {"txt": b"a caption", "jpg": b"\xff\xd8 pixels"})
    assert ExactDedup().digest(sample) == hashlib.blake2b(b"\xff\xd8 pixels", digest_size=16).digest()
    assert ExactDedup("txt").digest(sample) == content_hash(b"a caption") and len(content_hash(b"")) == 16
    with pytest.raises(BadInput, match="'k2' has no primary field"):
        ExactDedup().digest(PackSample("k2", 0, {"cls": b"1"}))


def test_digests_become_rows_and_duplicates_are_found():
    digests = [content_hash(data) for data in (b"a", b"b", b"a", b"c", b"b")]
    hashes = hashes_of(digests)
    assert hashes.shape == (5, 2) and hashes.dtype == np.dtype("<u8") and hashes[0].tobytes() == digests[0]
    assert first_occurrences(hashes).tolist() == [True, True, False, True, False]
    assert first_occurrences(hashes_of([])).tolist() == []


def test_it_pickles_and_records_its_options():
    dedup = ExactDedup("jpg")
    assert pickle.loads(pickle.dumps(dedup)) == dedup and dedup.options() == {"field": "jpg", "hash": "blake2b-128"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2)), max_size=60), st.integers(1, 5), st.integers(1, 7))
def test_the_chunked_plan_equals_the_in_memory_one(rows, partitions, chunk_rows):
    hashes = np.array(rows, dtype=np.uint64).reshape(-1, 2)
    assert first_occurrences_chunked(hashes, partitions, chunk_rows).tolist() == first_occurrences(hashes).tolist()


def test_the_chunked_plan_reads_a_memory_mapped_file(tmp_path):
    digests = [content_hash(bytes([i % 7])) for i in range(100)]
    np.save(tmp_path / "hashes.npy", hashes_of(digests))
    mapped = np.load(tmp_path / "hashes.npy", mmap_mode="r")
    assert first_occurrences_chunked(mapped, 3, chunk_rows=16).tolist() == [i < 7 for i in range(100)]

"""Worker split in whole batches: every worker but one gets a multiple of the batch size, so the
DataLoader's round-robin over workers yields exactly ceil(n / B) batches (floor with drop_last)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from corgi_io.schedule import assign_ranks, piece_samples, split_workers, worker_counts


def round_robin_batches(counts, batch_size):
    """The batch lengths a DataLoader yields from workers with these sample counts, in its order."""
    per_worker = [[min(batch_size, c - i) for i in range(0, c, batch_size)] for c in counts.tolist()]
    longest = max(map(len, per_worker))
    return [w[i] for i in range(longest) for w in per_worker if i < len(w)]


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 5000), workers=st.integers(0, 9), batch_size=st.integers(1, 70), drop_last=st.booleans())
def test_counts_are_whole_batches_but_the_last_one(n, workers, batch_size, drop_last):
    counts = worker_counts(n, workers, batch_size, drop_last)
    batches = n // batch_size if drop_last else -(-n // batch_size)
    assert len(counts) == max(1, workers) and (counts >= 0).all()
    assert counts.sum() == (batches * batch_size if drop_last else n)
    assert (counts % batch_size != 0).sum() <= (0 if drop_last else 1)
    yielded = round_robin_batches(counts, batch_size)
    assert len(yielded) == batches                                   # len(loader) == batches that come out
    assert all(b == batch_size for b in yielded[:-1])                # only the very last batch may be short
    per_worker_batches = -(-counts // batch_size)
    assert per_worker_batches.max() - per_worker_batches.min() <= 1  # workers stay within one batch


def test_batch_size_one_is_the_plain_sample_split():
    assert worker_counts(10, 4).tolist() == worker_counts(10, 4, 1).tolist() == [3, 3, 2, 2]
    assert worker_counts(2000, 2, 32).tolist() == [1008, 992]        # 63 batches: 32 + 31, the last one short
    assert worker_counts(2000, 2, 32, drop_last=True).tolist() == [992, 992]
    assert worker_counts(5, 3, 7).tolist() == [5, 0, 0]


@settings(max_examples=80, deadline=None)
@given(counts=st.lists(st.integers(1, 60), min_size=1, max_size=30), workers=st.integers(0, 5),
       batch_size=st.integers(1, 40), drop_last=st.booleans(), seed=st.integers(0, 100))
def test_split_is_the_rank_sequence_cut_in_order(counts, workers, batch_size, drop_last, seed):
    counts = np.asarray(counts)
    pieces = assign_ranks(np.cumsum(counts) - counts, counts, 3, seed=seed, epoch=0)[2]
    parts = split_workers(pieces, workers, batch_size, drop_last)
    ids = piece_samples(pieces)
    got = np.concatenate([piece_samples(p) for p in parts])
    expected = worker_counts(len(ids), workers, batch_size, drop_last)
    assert [len(piece_samples(p)) for p in parts] == expected.tolist()
    np.testing.assert_array_equal(got, ids[:len(got)])               # in order; drop_last leaves out the tail

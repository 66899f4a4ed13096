"""schedule/token_rows.py: documents placed into rows of exactly L tokens, every document of the epoch in exactly one
rank's stream, equal rows on every rank, worker shares that tile the rows, and resume arithmetic."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.errors import ResumeError
from corgi_io.schedule import BlockTable, loader_planner
from corgi_io.schedule.token_rows import RowOptions, RowPlanner, place_documents, remaining_rows, shares, take


def planner(sizes, world_size=2, length=16, eos=False, split=True, balance="count", shuffle="corgipile",
            batch_size=None, block=5, seed=0):
    first = np.arange(0, len(sizes), block)
    table = BlockTable.from_sizes(first, np.minimum(block, len(sizes) - first), sizes)
    samples = loader_planner(table, world_size, 0, shuffle=shuffle, buffer_blocks=2, seed=seed, balance=balance,
                             drop_last=False, batch_size=None)
    return RowPlanner(samples, RowOptions(length, eos, split), batch_size)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=0, max_size=60), st.integers(1, 20), st.booleans())
def test_documents_never_overlap_and_unsplit_ones_fit_their_row(lengths, length, split):
    lengths = np.array(lengths, np.int64)
    starts = place_documents(lengths, length, split)
    assert np.all(starts[1:] >= starts[:-1] + lengths[:-1]) if len(lengths) else True
    if split:
        assert starts.tolist() == (np.cumsum(lengths) - lengths).tolist()
        return
    for start, n in zip(starts.tolist(), lengths.tolist()):
        fits = n == 0 or start // length == (start + n - 1) // length
        assert fits or start % length == 0  # a document that does not fit its row starts one
    gaps = starts[1:] - (starts[:-1] + lengths[:-1])
    assert np.all((gaps == 0) | ((starts[1:] % length == 0) & (gaps < length)))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=80), st.integers(1, 4), st.booleans(), st.booleans(),
       st.sampled_from(["count", "size"]))
def test_every_document_in_one_stream_and_rows_cover_the_longest(sizes, world_size, eos, split, balance):
    rows = planner(sizes, world_size, 12, eos, split, balance)
    ids = np.concatenate([s.ids for s in rows.streams])
    assert sorted(ids.tolist()) == list(range(len(sizes)))
    for stream in rows.streams:
        assert stream.lengths.tolist() == (np.array(sizes)[stream.ids] + eos).tolist()
        assert stream.end <= rows.rows * 12
    assert max(-(-s.end // 12) for s in rows.streams) == rows.rows == rows.rank_items(0)


@pytest.mark.parametrize("split", [True, False])
def test_buffers_list_exactly_the_documents_of_a_slot_range(split):
    rows = planner(np.random.default_rng(1).integers(1, 40, 100), 1, 16, True, split)
    stream = rows.streams[0]
    for lo, hi in [(0, 16), (5, 77), (100, 400), (0, rows.rows * 16)]:
        docs = [i for _, first, stop in stream.buffers(lo, hi) for i in range(first, stop)]
        touch = [i for i, (a, n) in enumerate(zip(stream.starts, stream.lengths)) if a < hi and a + n > lo]
        assert docs == touch
        for pieces, first, stop in stream.buffers(lo, hi):
            held = {x for _, a, z in pieces.tolist() for x in range(a, z)}
            assert set(stream.ids[first:stop].tolist()) <= held


def test_waste_counts_padding_slots():
    rows = planner([4] * 10, 1, 16, split=False)  # 40 tokens: 4 docs a row, 3 rows
    assert rows.rows == 3 and rows.waste() == pytest.approx(1 - 40 / 48)
    unsplit = planner([10] * 4, 1, 16, split=False)  # one 10-token doc a row
    assert unsplit.rows == 4 and unsplit.waste() == pytest.approx(1 - 40 / 64)
    assert planner([10] * 4, 1, 16, split=True).rows == 3


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 4), st.integers(1, 5))
def test_worker_shares_tile_the_rows_in_whole_batches(rows, workers, batch):
    dealt = shares([(0, rows)] if rows else [], workers, batch)
    flat = [r for share in dealt for a, b in share for r in range(a, b)]
    assert flat == list(range(rows))
    assert sum(1 for share in dealt if sum(b - a for a, b in share) % batch) <= 1


def test_take_cuts_positions_of_ranges():
    assert take([(0, 3), (10, 14)], 2, 5) == [(2, 3), (10, 12)]
    assert take([(0, 3)], 3, 9) == []


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.lists(st.tuples(st.integers(1, 4), st.integers(0, 40)), max_size=3), st.integers(1, 3))
def test_remaining_rows_are_the_rows_no_worker_yielded(rows, segments, batch):
    finished, left = [], list(range(rows))
    for workers, steps in segments:
        dealt = shares([(a, a + 1) for a in left], workers, batch)
        counts = [min(sum(b - a for a, b in share), steps) for share in dealt]
        yielded = {r for share, c in zip(dealt, counts) for a, b in take(share, 0, c) for r in range(a, b)}
        left = [r for r in left if r not in yielded]
        finished.append({"num_workers": workers, "yielded": counts})
    assert [r for a, b in remaining_rows(rows, finished, batch) for r in range(a, b)] == left


def resume(world_size, workers, yielded, finished=()):
    return {"world_size": world_size, "num_workers": workers, "yielded": yielded, "finished": list(finished)}


def test_resume_same_workers_continues_each_share_and_another_count_deals_the_rest():
    rows = planner(np.full(60, 8), 1, 16, batch_size=2)  # 30 rows, 15 batches
    whole = [rows.plan(0, k, 2) for k in range(2)]
    assert whole == [[(0, 16)], [(16, 30)]]
    ranges, finished, done = rows.resumed_plan(0, 1, 2, resume(1, 2, {0: 4, 1: 2}))
    assert (ranges, finished, done) == ([(18, 30)], [], 2)
    dealt = [rows.resumed_plan(0, k, 3, resume(1, 2, {0: 4, 1: 2}))[0] for k in range(3)]
    assert [r for share in dealt for a, b in share for r in range(a, b)] == [*range(4, 16), *range(18, 30)]


def test_resume_refuses_another_world_size_and_a_partial_state():
    rows = planner(np.full(60, 8), 2, 16)
    with pytest.raises(ResumeError, match="world size"):
        rows.resumed_plan(0, 0, 1, resume(3, 1, {0: 2}))
    with pytest.raises(ResumeError, match="1 of 2 workers"):
        rows.resumed_plan(0, 0, 3, resume(2, 2, {0: 2}))

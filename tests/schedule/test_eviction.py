"""The eviction policies of the remote-piece cache: Belady's rule is optimal for equal pieces, never evicts a
piece used sooner than one kept, and LRU evicts the least recently read."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings, strategies as st

from corgi_io.errors import ArgumentError
from corgi_io.schedule.eviction import NEVER, CacheBook, Decision, FutureUses, decide


def simulate(sequence, sizes, limit, policy, check=None):
    """Bytes fetched reading `sequence` through a cache of `limit` bytes under `policy`; `check(book, key, cached,
    decision)` sees every miss's decision."""
    book, cached, fetched = CacheBook(policy, limit), {}, 0
    book.plan(sequence)
    for key in sequence:
        hit = key in cached
        book.access(key)
        if hit:
            continue
        fetched += sizes[key]
        decision = book.decide(key, sizes[key], cached)
        if check is not None:
            check(book, key, cached, decision)
        for victim in decision.evict:
            del cached[victim]
        if decision.admit:
            cached[key] = sizes[key]
        assert sum(cached.values()) <= limit
    return fetched


def fewest_misses(sequence, capacity) -> int:
    """The optimum by exhaustive search: every choice of keeping, replacing any one piece, or not keeping."""
    @functools.cache
    def best(i, cached):
        if i == len(sequence):
            return 0
        key = sequence[i]
        if key in cached:
            return best(i + 1, cached)
        options = [cached] + ([cached | {key}] if len(cached) < capacity else
                              [(cached - {victim}) | {key} for victim in cached])
        return 1 + min(best(i + 1, frozenset(option)) for option in options)
    return best(0, frozenset())


sequences = st.lists(st.integers(0, 5), min_size=1, max_size=14)


@settings(max_examples=300, deadline=None)
@given(sequences, st.integers(1, 4))
def test_belady_is_optimal_for_equal_pieces(sequence, capacity):
    misses = simulate(sequence, {key: 1 for key in sequence}, capacity, "belady")
    assert misses == fewest_misses(tuple(sequence), capacity)


@settings(max_examples=300, deadline=None)
@given(sequences, st.integers(1, 4))
def test_belady_never_fetches_more_than_lru_for_equal_pieces(sequence, capacity):
    sizes = {key: 1 for key in sequence}
    assert simulate(sequence, sizes, capacity, "belady") <= simulate(sequence, sizes, capacity, "lru")


@settings(max_examples=300, deadline=None)
@given(sequences, st.lists(st.integers(1, 9), min_size=6, max_size=6), st.integers(1, 20))
def test_belady_never_evicts_a_piece_used_sooner_than_one_kept(sequence, size_list, limit):
    def check(book, key, cached, decision):
        soonest_evicted = min((book.future.next_use(k) for k in decision.evict), default=NEVER)
        assert all(book.future.next_use(k) <= soonest_evicted for k in cached if k not in decision.evict)
        if decision.evict:  # what a new piece displaces is wanted later than the new piece
            assert decision.admit and soonest_evicted > book.future.next_use(key)

    simulate(sequence, dict(enumerate(size_list)), limit, "belady", check)


def test_lru_evicts_the_least_recently_read():
    book = CacheBook("lru", 2)
    for key in "abca":  # b is now the oldest
        book.access(key)
    assert book.decide("c", 1, {"a": 1, "b": 1}) == Decision(True, ("b",))


def test_belady_refuses_a_piece_wanted_later_than_all_it_would_displace():
    book = CacheBook("belady", 2)
    book.plan("cabab")
    book.access("c")  # c is never read again: keeping it would displace a or b, both wanted sooner
    decision = book.decide("c", 1, {"a": 1, "b": 1})
    assert not decision.admit and decision.evict == ()
    assert book.decide("c", 1, {"a": 1}).admit  # room to spare costs nothing


def test_decide_refuses_a_piece_above_the_limit_and_evicts_only_what_is_needed():
    urgency = {"new": 0, "a": 5, "b": 9, "c": 7}.get
    assert decide("new", 11, {}, 10, urgency).admit is False
    assert decide("new", 3, {"a": 3, "b": 3, "c": 3}, 10, urgency).evict == ("b",)
    assert decide("new", 6, {"a": 3, "b": 3, "c": 3}, 10, urgency).evict == ("b", "c")


def test_future_uses_gives_each_piece_its_next_position_whatever_order_reads_finish_in():
    future = FutureUses(["a", "b", "a", "c"])
    future.consume("b")  # finished before the first read of a
    assert [future.next_use(key) for key in "abcz"] == [0, NEVER, 3, NEVER]
    future.consume("a")
    future.consume("a")
    future.consume("a")  # one read more than the future holds consumes nothing
    assert [future.next_use(key) for key in "abc"] == [NEVER, NEVER, 3]


def test_a_policy_and_limit_are_checked():
    with pytest.raises(ArgumentError, match="cache_policy"):
        CacheBook("fifo", 10)
    with pytest.raises(ArgumentError, match="cache_limit"):
        CacheBook("belady", 0)

"""`schedule.run_model`: a run priced from the plan alone, checked against what can be worked out by hand, and its
cache replay against the loader's own eviction book."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from corgi_io.errors import ArgumentError
from corgi_io.schedule import BlockTable
from corgi_io.schedule import cache_replay
from corgi_io.schedule.cache_replay import CacheReplay, HeapBook
from corgi_io.schedule.epoch import loader_planner
from corgi_io.schedule.run_clock import Link
from corgi_io.schedule.run_model import PieceBytes, RunModel, predict_run


class Pack:
    """A synthetic pack in one shard: blocks of `counts` samples, sample i's record `lengths[i]` bytes, back to
    back; the loader's planner of each epoch with the options given."""

    def __init__(self, counts, lengths, world_size=1, buffer_blocks=4, batch_size=None):
        self.count = np.asarray(counts, np.int64)
        self.first = np.concatenate(([0], np.cumsum(self.count)[:-1]))
        self.lengths = np.asarray(lengths, np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(self.lengths)[:-1]))
        self.block_bytes = np.add.reduceat(self.lengths, self.first)
        self.table = BlockTable.from_sizes(self.first, self.count, np.ones(len(self.lengths), np.int64))
        self.options = dict(world_size=world_size, buffer_blocks=buffer_blocks, batch_size=batch_size)

    def planner(self, epoch: int):
        o = self.options
        return loader_planner(self.table, o["world_size"], epoch, shuffle="corgipile", buffer_blocks=o["buffer_blocks"],
                              seed=3, balance="count", drop_last=False, batch_size=o["batch_size"])

    def predict(self, model: RunModel, workers: int = 0, epochs: int = 1) -> dict:
        return predict_run(self.planner, PieceBytes(self.first, self.count, self.block_bytes, self.offsets,
                                                    self.lengths), model, workers=workers, epochs=epochs)

    def read_bytes(self, pieces) -> list:
        """Each piece's bytes, first record's offset to last record's end (an independent reading)."""
        return [int(self.offsets[z - 1] + self.lengths[z - 1] - self.offsets[a]) for _, a, z in pieces.tolist()]

    def workers(self, workers: int, epoch: int = 0) -> list:
        """[(rank, pieces, samples yielded)] of every worker of every rank, from the planner."""
        planner, k = self.planner(epoch), max(1, workers)
        return [(r, planner.worker_pieces(r, w, k), sum(len(order) for _, order in planner.plan(r, w, k)))
                for r in range(self.options["world_size"]) for w in range(k)]


@st.composite
def packs(draw, most_blocks=24, batches=True):
    counts = draw(st.lists(st.integers(1, 6), min_size=1, max_size=most_blocks))
    lengths = draw(st.lists(st.integers(1, 5000), min_size=sum(counts), max_size=sum(counts)))
    batch = draw(st.one_of(st.none(), st.integers(1, 5))) if batches else None
    return Pack(counts, lengths, world_size=draw(st.integers(1, 3)), buffer_blocks=draw(st.integers(1, 4)),
                batch_size=batch)


@settings(max_examples=60, deadline=None)
@given(packs(), st.integers(0, 3))
def test_remote_bytes_of_an_uncached_epoch_are_the_bytes_of_the_planned_pieces(pack, workers):
    epoch = pack.predict(RunModel(bandwidth=1e6, latency=0.01), workers)["epochs"][0]
    planned = sum(sum(pack.read_bytes(pieces)) for _, pieces, _ in pack.workers(workers))
    assert epoch["remote_bytes"] == epoch["read_bytes"] == planned
    assert epoch["hit_rate"] is None


@settings(max_examples=60, deadline=None)
@given(packs(), st.integers(0, 3), st.floats(0.001, 0.5), st.floats(0.0, 0.05), st.integers(1, 4),
       st.floats(0.0, 0.002), st.floats(1.0, 50.0))
def test_more_bandwidth_never_predicts_a_slower_epoch(pack, workers, bandwidth, latency, in_flight, decode, more):
    def wall(rate):
        model = RunModel(bandwidth=rate * 1e6, latency=latency, in_flight=in_flight, decode=decode)
        return pack.predict(model, workers)["epochs"][0]["wall_time"]
    assert wall(bandwidth * more) <= wall(bandwidth) * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(packs(), st.integers(0, 3), st.floats(0.0, 0.01), st.floats(0.0, 1e-6), st.floats(0.0, 0.1))
def test_no_latency_and_no_bandwidth_limit_leave_the_decode_bound(pack, workers, decode, per_byte, start):
    epoch = pack.predict(RunModel(decode=decode, decode_per_byte=per_byte, start=start), workers)["epochs"][0]
    cpu = [samples * decode + sum(pack.read_bytes(pieces)) * per_byte for _, pieces, samples in pack.workers(workers)]
    assert epoch["wall_time"] == pytest.approx(start + max(cpu), rel=1e-9, abs=1e-12)
    assert epoch["decode_time"] == pytest.approx(max(cpu), rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(packs(batches=False), st.integers(0, 3), st.floats(1e3, 1e9))
def test_without_latency_the_link_is_busy_until_the_rank_ends(pack, workers, bandwidth):
    """A read always runs while a worker has pieces left (the consumer only waits for one), so the rank's epoch
    is its bytes over the bandwidth, however many workers and reads in flight."""
    epoch = pack.predict(RunModel(bandwidth=bandwidth, in_flight=2), workers)["epochs"][0]
    for rank, wall in enumerate(epoch["rank_time"]):
        nbytes = sum(sum(pack.read_bytes(pieces)) for r, pieces, _ in pack.workers(workers) if r == rank)
        assert wall == pytest.approx(nbytes / bandwidth, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(packs(batches=False), st.integers(1, 4), st.floats(0.001, 0.1))
def test_latency_alone_costs_one_round_trip_per_wave_of_reads(pack, in_flight, latency):
    pack.options["world_size"] = 1
    in_flight = min(in_flight, pack.options["buffer_blocks"])  # the reads in flight never exceed the read-ahead
    epoch = pack.predict(RunModel(latency=latency, in_flight=in_flight))["epochs"][0]
    pieces = len(pack.workers(0)[0][1])
    assert epoch["wall_time"] == pytest.approx(math.ceil(pieces / in_flight) * latency)


@pytest.mark.parametrize("buffer_blocks,prefetch", [(4, None), (4, 2), (2, 6)])
def test_the_memory_bound_is_a_buffer_and_its_read_ahead(buffer_blocks, prefetch):
    pack = Pack([5] * 20, [100] * 100, buffer_blocks=buffer_blocks)
    memory = pack.predict(RunModel(prefetch=prefetch), workers=2)["memory"]
    assert memory["worker"] == (buffer_blocks + (prefetch or buffer_blocks)) * 500
    assert memory["rank"] == 2 * memory["worker"]


@settings(max_examples=60, deadline=None)
@given(packs(batches=False), st.integers(0, 1), st.integers(0, 2), st.sampled_from(["belady", "lru"]))
def test_a_cache_as_large_as_the_pack_reads_every_byte_once_over_two_epochs(pack, workers, spare, policy):
    pack.options["world_size"] = 1  # one reader: every piece is a whole block, in both epochs
    size = int(pack.block_bytes.sum())
    first, second = pack.predict(RunModel(cache_bytes=size + spare, cache_policy=policy), workers, epochs=2)["epochs"]
    assert first["remote_bytes"] + second["remote_bytes"] == size
    assert second["remote_bytes"] == 0 and second["hit_rate"] == 1.0


def test_belady_with_half_the_pack_fetches_half_of_it_per_epoch_after_the_first():
    """Each block once in the first epoch (a block the next epoch starts with, fetched ahead before this one reads
    it, is a hit: 1 of 40 here); then half the pack per epoch, the least any policy can (docs/algorithms.md)."""
    pack = Pack([8] * 40, [1000] * 320)
    size = int(pack.block_bytes.sum())
    epochs = pack.predict(RunModel(cache_bytes=size // 2), epochs=3)["epochs"]
    assert [e["remote_bytes"] for e in epochs] == [size, size // 2, size // 2]
    assert [e["hit_rate"] for e in epochs] == [1 / 40, 21 / 40, 20 / 40]


class PlainBook(HeapBook):
    """The loader's way: `CacheBook.decide` over every piece of the folder."""

    def decide(self, key, nbytes, folder):
        return self.book.decide(key, nbytes, folder.held)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 40), st.sampled_from(["belady", "lru"]), st.integers(0, 4),
       st.integers(1, 3))
def test_the_heap_book_decides_as_the_loaders_book(data, workers, limit, policy, prefetch, streams):
    keys = st.sampled_from([f"{i}-{i + 1}" for i in range(10)])
    epochs = [[data.draw(st.lists(keys, max_size=12)) for _ in range(workers)] for _ in range(3)]
    sizes = {f"{i}-{i + 1}": data.draw(st.integers(1, 12)) for i in range(10)}

    def replay():
        replay = CacheReplay(limit, sizes, policy, prefetch, streams)
        return [replay.epoch(epochs[e], epochs[e + 1]) for e in range(2)] + [replay.folder.held]

    fast = replay()
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(cache_replay, "HeapBook", PlainBook)
        plain = replay()
    assert [{**r, "remote": [f.tolist() for f in r["remote"]]} for r in fast[:2]] == \
        [{**r, "remote": [f.tolist() for f in r["remote"]]} for r in plain[:2]]
    assert fast[2] == plain[2] and sum(fast[2].values()) <= limit


def test_the_link_shares_its_bandwidth_among_the_transfers_under_way():
    link = Link(1e6)
    link.add(0.0, 1e6, "small")
    link.add(0.0, 3e6, "large")
    assert link.next_end() == pytest.approx(2.0) and link.pop(2.0) == "small"  # both at 0.5 MB/s
    link.add(2.0, 0.5e6, "late")  # the large one has 2 MB left; both at 0.5 MB/s again
    assert link.next_end() == pytest.approx(3.0) and link.pop(3.0) == "late"
    assert link.next_end() == pytest.approx(4.5) and link.pop(4.5) == "large"


@pytest.mark.parametrize("options,message", [({"bandwidth": 0}, "bandwidth"), ({"latency": -1.0}, "latency"),
                                             ({"in_flight": 0}, "in_flight"), ({"cache_bytes": -1}, "cache_bytes"),
                                             ({"cache_policy": "fifo"}, "cache_policy"), ({"cores": 0}, "cores"),
                                             ({"start": -0.1}, "start")])
def test_a_bad_model_is_refused_by_name(options, message):
    with pytest.raises(ArgumentError, match=message):
        RunModel(**options)


def test_the_memory_bound_of_a_run_is_its_largest_epochs():
    """A later epoch that puts the big blocks in one buffer holds more than the first: the run's bound says so."""
    rng = np.random.default_rng(0)
    pack = Pack([4] * 24, rng.integers(1, 20000, 96).tolist(), buffer_blocks=2)
    pieces = PieceBytes(pack.first, pack.count, pack.block_bytes, pack.offsets, pack.lengths)
    per_epoch = [predict_run(pack.planner, pieces, RunModel(), epochs=1, first_epoch=e)["memory"]
                 for e in range(4)]
    run = predict_run(pack.planner, pieces, RunModel(), epochs=4)["memory"]
    assert run["worker"] == max(m["worker"] for m in per_epoch) > per_epoch[0]["worker"]
    assert run["rank"] == max(m["rank"] for m in per_epoch)

"""The reader's stages, each alone: read-ahead, split and buffer order (verify: tests/test_read_checks.py).

The composition is tested in tests/test_piece_reader.py; here each stage gets plain inputs, so a
failure points at one stage.
"""
from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest

from corgi_io.manifest import KINDS, open_manifest
from corgi_io.reading.in_flight import InFlight
from corgi_io.reading.order import buffer_order
from corgi_io.reading.read_ahead import Marker, read_ahead
from corgi_io.reading.reader import Residency
from corgi_io.reading.split import PieceSplitter
from corgi_io.schedule import block_pieces
from test_read_checks import piece_bytes


# --- read-ahead ------------------------------------------------------------------------------------

class SlowReads:
    """A read that sleeps a little and records how many reads ran at once and were submitted ahead."""

    def __init__(self, seconds: float = 0.01):
        self.seconds, self.running, self.most_running = seconds, 0, 0
        self.lock = threading.Lock()

    def __call__(self, step):
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return ("read", step)


def test_read_ahead_yields_reads_and_markers_in_step_order():
    steps = [1, 2, Marker("a"), 3, Marker("b"), Marker("c"), 4]
    got = list(read_ahead(steps, SlowReads(0.001), ahead=2, threads=2))
    assert got == [("read", 1), ("read", 2), Marker("a"), ("read", 3), Marker("b"), Marker("c"), ("read", 4)]


@pytest.mark.parametrize("ahead,threads", [(1, 1), (3, 2), (6, 4)])
def test_read_ahead_keeps_several_reads_in_flight_but_no_more_than_asked(ahead, threads):
    reads, submitted, consumed = SlowReads(), [], []
    stage = read_ahead(range(20), reads, ahead=ahead, threads=threads, on_submit=submitted.append)
    for item in stage:
        consumed.append(item)
        assert len(submitted) - len(consumed) <= ahead   # read or in flight, not yet consumed
        time.sleep(0.005)
    assert [step for _, step in consumed] == list(range(20))
    assert reads.most_running == min(ahead, threads)


def test_read_ahead_raises_a_failed_read_in_the_consumer_and_stops_reading():
    calls = []

    def read(step):
        calls.append(step)
        if step == 3:
            raise OSError("disk on fire")
        return step

    before = set(threading.enumerate())
    with pytest.raises(OSError, match="disk on fire"):
        list(read_ahead(range(100), read, ahead=2, threads=2))
    assert max(calls) <= 3 + 2 and not set(threading.enumerate()) - before


def test_closing_read_ahead_early_cancels_what_has_not_started():
    calls = []
    stage = read_ahead(range(1000), lambda step: calls.append(step) or step, ahead=4, threads=2)
    assert next(stage) == 0
    stage.close()
    time.sleep(0.02)
    assert len(calls) <= 1 + 4


# --- split ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mixed_pack(packed_mixed):
    """The shared mixed pack (images, texts, videos; several blocks and shards): (root, manifest)."""
    return packed_mixed("wds"), open_manifest(packed_mixed("wds"))


EXTENSIONS = {"image": {"jpg", "png"}, "video": {"avi", "mp4"}, "text": {"txt", "md"}}  # the mixed corpus's files


def piece_of(root, m, piece) -> bytes:
    return piece_bytes(m, root, piece[1], piece[2])


def test_split_cuts_each_payload_by_the_manifests_offsets_with_its_fields(mixed_pack):
    root, m = mixed_pack
    s, keys, splitter, kinds = m.samples, m.keys(), PieceSplitter(m), set()
    for piece in block_pieces(np.arange(len(m.blocks)), m.blocks.first, m.blocks.count).tolist():
        data = piece_of(root, m, piece)
        samples, payload = splitter.split(tuple(piece), data)
        assert [x["index"] for x in samples] == list(range(piece[1], piece[2]))
        assert payload == sum(len(x["data"]) for x in samples)
        for x in samples:
            i = x["index"]
            start = int(s.data_offset[i] - s.offset[piece[1]])
            assert x["data"] == data[start:start + int(s.bytes[i])] and type(x["data"]) is bytes
            assert (x["key"], x["label"], x["size"]) == (keys[i], int(s.label[i]), int(s.size[i]))
            assert (x["kind"], x["ext"]) == (KINDS[int(s.kind[i])], m.extensions[int(s.ext[i])])
            assert x["ext"] in EXTENSIONS[x["kind"]]
            kinds.add(x["kind"])
    assert kinds == set(EXTENSIONS)


def test_split_samples_are_plain_picklable_values(mixed_pack):
    """No memoryview leaks out: a DataLoader worker pickles every sample onto its queue."""
    root, m = mixed_pack
    piece = (0, 0, int(m.blocks.count[0]))
    samples, _ = PieceSplitter(m).split(piece, piece_of(root, m, piece))
    assert pickle.loads(pickle.dumps(samples)) == samples
    assert {type(v) for x in samples for v in x.values()} <= {int, str, bytes}


# --- buffer order -----------------------------------------------------------------------------------

def fake_piece(start: int, stop: int) -> list:
    return [{"index": i, "data": bytes(10 + i)} for i in range(start, stop)]


def test_order_yields_each_buffer_in_its_order_and_releases_what_left():
    residency = Residency()
    residency.hold(sum(10 + i for i in range(6)))
    steps = [fake_piece(0, 3), fake_piece(3, 6), Marker(np.array([4, 0, 2, 5, 1, 3]))]
    got = [x["index"] for x in buffer_order(steps, residency)]
    assert got == [4, 0, 2, 5, 1, 3] and residency.held == 0


def test_order_holds_samples_read_for_an_earlier_buffer_until_listed():
    steps = [fake_piece(0, 4), Marker(np.array([1, 3])), fake_piece(4, 6), Marker(np.array([5, 0, 4, 2]))]
    assert [x["index"] for x in buffer_order(steps, Residency())] == [1, 3, 5, 0, 4, 2]


def test_order_yields_a_sample_listed_twice_as_two_distinct_dicts():
    residency = Residency()
    residency.hold(2 * sum(10 + i for i in range(2)))
    steps = [fake_piece(0, 2), fake_piece(0, 2), Marker(np.array([1, 0, 0, 1]))]
    got = list(buffer_order(steps, residency))
    assert [x["index"] for x in got] == [1, 0, 0, 1]
    assert len({id(x) for x in got}) == 4 and residency.held == 0
    got[0]["data"] = None  # a consumer changing one copy leaves the other intact
    assert got[3]["data"] == bytes(11)


def test_order_refuses_a_plan_that_lists_a_sample_never_read():
    with pytest.raises(KeyError):
        list(buffer_order([fake_piece(0, 2), Marker(np.array([0, 7]))], Residency()))


# --- reads in flight ------------------------------------------------------------------------------

def run_reads(gate, read, count: int, threads: int) -> None:
    """`count` reads through `gate`, submitted as the reader does: a pool of `threads`, all queued."""
    list(read_ahead(range(count), lambda step: gate.run(read), ahead=count, threads=threads))


def test_reads_in_flight_grow_while_latency_is_what_limits():
    gate = InFlight(1, 4, window=4)
    run_reads(gate, lambda: time.sleep(0.01) or bytes(1000), 60, threads=4)
    assert gate.limit == 4 and gate.settled


def test_reads_in_flight_settle_low_when_reads_share_one_resource():
    lock = threading.Lock()

    def serialised():
        with lock:   # a CPU- or link-bound read: more at once only makes each one slower
            time.sleep(0.005)
        return bytes(1000)

    gate = InFlight(1, 6, window=4)
    run_reads(gate, serialised, 60, threads=6)
    assert gate.settled and gate.limit <= 2


def test_a_fixed_number_of_reads_in_flight_never_changes():
    gate = InFlight(3, 3)
    assert gate.settled
    run_reads(gate, lambda: bytes(10), 20, threads=3)
    assert gate.limit == 3

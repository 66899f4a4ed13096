"""The reader's stages, each alone: read-ahead, split and buffer order (verify: tests/reading/test_read_checks.py).

The composition is tested in tests/reading/test_piece_reader.py; here each stage gets plain inputs, so a
failure points at one stage.
"""
from __future__ import annotations

import threading
import time
import weakref

import numpy as np
import pytest

from corgi_io.manifest import KINDS, open_manifest
from corgi_io.reading.in_flight import InFlight
from corgi_io.reading.reorder import buffer_order
from corgi_io.reading.read_ahead import Marker, read_ahead
from corgi_io.reading.piece_reader import Residency, ordered_samples
from corgi_io.reading.split import PieceSplitter
from corgi_io.schedule import block_pieces
from helpers.packs import piece_bytes


# --- read-ahead ------------------------------------------------------------------------------------

class SlowReads:
    """A read that records how many reads ran at once; the first `together` reads wait (up to a second)
    until they all run, which read-ahead allows from its first pull on."""

    def __init__(self, together: int = 1):
        self.together, self.running, self.most_running = together, 0, 0
        self.changed = threading.Condition()

    def __call__(self, step):
        with self.changed:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.changed.notify_all()
            if step < self.together:
                self.changed.wait_for(lambda: self.most_running >= self.together, timeout=1.0)
        with self.changed:
            self.running -= 1
        return ("read", step)


def test_read_ahead_yields_reads_and_markers_in_step_order():
    steps = [1, 2, Marker("a"), 3, Marker("b"), Marker("c"), 4]
    got = list(read_ahead(steps, SlowReads(), ahead=2, threads=2))
    assert got == [("read", 1), ("read", 2), Marker("a"), ("read", 3), Marker("b"), Marker("c"), ("read", 4)]


@pytest.mark.parametrize("ahead,threads", [(1, 1), (3, 2), (6, 4)])
def test_read_ahead_keeps_several_reads_in_flight_but_no_more_than_asked(ahead, threads):
    reads, submitted, consumed = SlowReads(together=min(ahead, threads)), [], []
    stage = read_ahead(range(20), reads, ahead=ahead, threads=threads, on_submit=submitted.append)
    for item in stage:
        consumed.append(item)
        assert len(submitted) - len(consumed) <= ahead   # read or in flight, not yet consumed
        time.sleep(0.002)
    assert [step for _, step in consumed] == list(range(20))
    assert reads.most_running == min(ahead, threads)   # as many at once as allowed, never more


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


def test_split_samples_hold_only_plain_values(mixed_pack):
    """No memoryview leaks out: a DataLoader worker must serialise every sample onto its queue."""
    root, m = mixed_pack
    piece = (0, 0, int(m.blocks.count[0]))
    samples, _ = PieceSplitter(m).split(piece, piece_of(root, m, piece))
    assert {type(v) for x in samples for v in x.values()} <= {int, str, bytes}


# --- buffer order -----------------------------------------------------------------------------------

def fake_piece(start: int, stop: int) -> tuple:
    return start, [{"index": i, "data": bytes(10 + i)} for i in range(start, stop)]


def test_order_yields_each_buffer_in_its_order_and_releases_what_left():
    residency = Residency()
    residency.split(0, sum(10 + i for i in range(6)))
    steps = [fake_piece(0, 3), fake_piece(3, 6), Marker(np.array([4, 0, 2, 5, 1, 3]))]
    got = [x["index"] for x in buffer_order(steps, residency)]
    assert got == [4, 0, 2, 5, 1, 3] and residency.held == 0


def test_order_holds_samples_read_for_an_earlier_buffer_until_listed():
    residency = Residency()
    residency.split(0, sum(10 + i for i in range(6)))
    steps = [fake_piece(0, 4), Marker(np.array([1, 3])), fake_piece(4, 6), Marker(np.array([5, 0, 4, 2]))]
    got = buffer_order(steps, residency)
    assert [next(got)["index"] for _ in range(3)] == [1, 3, 5]
    assert residency.payloads == sum(10 + i for i in (0, 2, 4, 5))  # the first buffer's two left
    assert [x["index"] for x in got] == [0, 4, 2] and residency.payloads == 0


def test_order_yields_a_sample_listed_twice_as_two_distinct_dicts():
    residency = Residency()
    residency.split(0, 2 * sum(10 + i for i in range(2)))
    steps = [fake_piece(0, 2), fake_piece(0, 2), Marker(np.array([1, 0, 0, 1]))]
    got = list(buffer_order(steps, residency))
    assert [x["index"] for x in got] == [1, 0, 0, 1]
    assert len({id(x) for x in got}) == 4 and residency.held == 0
    got[0]["data"] = None  # a consumer changing one copy leaves the other intact
    assert got[3]["data"] == bytes(11)


@pytest.mark.parametrize("window", [False, True])
def test_the_reader_keeps_no_yielded_sample_alive(window):
    """What a consumer puts in a sample's dict (a decoded image) is freed once it drops the sample, not at the end
    of the buffer; in window mode too, where samples stay for a later buffer."""
    class Decoded:  # weakly referable, as a decoded array is
        pass

    def read(piece: tuple) -> tuple:
        first, samples = fake_piece(piece[1], piece[2])
        return first, samples, sum(len(x["data"]) for x in samples), 0

    pieces = np.array([[0, 0, 3], [0, 3, 6]])
    plan = [(pieces[:1], np.array([2, 0])), (pieces[1:], np.array([4, 1, 3, 5]))] if window else \
        [(pieces, np.array([4, 0, 2, 5, 1, 3]))]
    alive = []
    for sample in ordered_samples(plan, read, lambda piece: 0, Residency(), ahead=2, threads=1):
        assert not any(ref() for ref in alive)  # every sample yielded before this one is gone
        sample["data"] = Decoded()
        alive.append(weakref.ref(sample["data"]))
        del sample
    assert len(alive) == 6


def test_order_refuses_a_plan_that_lists_a_sample_never_read():
    with pytest.raises(KeyError):
        list(buffer_order([fake_piece(0, 2), Marker(np.array([0, 7]))], Residency()))


# --- reads in flight ------------------------------------------------------------------------------

def test_the_gate_never_runs_more_reads_than_its_limit():
    gate, lock, running, most = InFlight(3, 3), threading.Lock(), [0], [0]

    def read():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= 1
        return bytes(10)

    list(read_ahead(range(40), lambda step: gate.run(read), ahead=40, threads=8))
    assert most[0] == 3 and gate.limit == 3 and gate.settled

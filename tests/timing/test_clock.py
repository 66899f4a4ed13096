"""StageClock: the consumer's switches partition its time, the reading threads' additions all arrive, the board only
grows, and a trace keeps the newest intervals (issue 32 §1)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from corgi_io.timing.clock import NULL_CLOCK, StageClock, TraceRing
from corgi_io.timing.stages import FIELDS, STAGES, TIMINGS, names, stage_index

DECODE, ORDER, STORAGE, HANDOFF = map(stage_index, ("decode", "order", "storage", "handoff"))
SECONDS, BYTES, SAMPLES, CALLS = range(len(FIELDS))


def board_row() -> np.ndarray:
    return np.zeros((len(STAGES), len(FIELDS)))


def test_switches_partition_the_consumers_wall_time_among_its_stages():
    row = board_row()
    clock = StageClock(row)
    start = time.perf_counter()
    clock.restart()
    for _ in range(5):
        clock.switch(DECODE)
        time.sleep(0.004)
        clock.switch(HANDOFF)
        time.sleep(0.001)
        clock.switch(ORDER)
    clock.close()
    wall = time.perf_counter() - start
    assert 5 * (0.004 + 0.001) <= row[:, SECONDS].sum() <= wall  # nothing slept is lost, nothing counted twice
    assert row[DECODE, SECONDS] >= 0.02 and row[HANDOFF, SECONDS] >= 0.005
    assert row[DECODE, CALLS] == 5 and row[HANDOFF, CALLS] == 5


def test_a_nested_switch_returns_to_the_stage_it_left():
    row = board_row()
    clock = StageClock(row)
    clock.restart()
    outer = clock.switch(DECODE)
    assert outer == ORDER
    inner = clock.switch(HANDOFF)
    assert inner == DECODE and clock.switch(inner) == HANDOFF and clock.stage == DECODE


def test_additions_from_many_threads_all_reach_the_board():
    row = board_row()
    clock = StageClock(row)

    def read():
        for _ in range(1000):
            clock.add(STORAGE, 0.001, 10, 2)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.flush()
    assert row[STORAGE].tolist() == pytest.approx([8.0, 80_000, 16_000, 8000])


def test_the_board_only_grows_and_a_second_clock_of_the_slot_continues_it():
    """A new worker process of the same slot (non-persistent workers) adds to what the last one left."""
    row = board_row()
    first = StageClock(row)
    first.add(STORAGE, 1.0, 100, 4)
    first.flush()
    second = StageClock(row)
    second.add(STORAGE, 0.5, 50, 2)
    second.flush()
    assert row[STORAGE].tolist() == [1.5, 150, 6, 2]


def test_totals_wait_in_the_process_until_a_flush():
    row = board_row()
    clock = StageClock(row)
    clock.add(STORAGE, 1.0)
    assert not row.any()
    clock.flush()
    assert row[STORAGE, SECONDS] == 1.0


def test_the_time_between_passes_is_nobodys():
    row = board_row()
    clock = StageClock(row)
    clock.close()
    time.sleep(0.05)
    clock.restart()
    clock.close()
    assert row[:, SECONDS].sum() < 0.02


def test_the_null_clock_counts_nothing_and_gives_the_stage_back():
    assert NULL_CLOCK.switch(DECODE) == DECODE
    NULL_CLOCK.add(STORAGE, 1.0)
    NULL_CLOCK.close()


@pytest.mark.parametrize("capacity, intervals", [(8, 5), (8, 8), (8, 21)])
def test_a_trace_keeps_the_newest_intervals_and_counts_all(capacity, intervals):
    events, written = np.zeros((capacity, 3)), np.zeros(1, np.int64)
    ring = TraceRing(events, written)
    for i in range(intervals):
        ring.add(i % len(STAGES), float(i), i + 0.5)
        if i % 3 == 0:
            ring.flush()
    ring.flush()
    assert int(written[0]) == intervals
    kept = sorted(events[:min(capacity, intervals), 1].tolist())
    assert kept == [float(i) for i in range(max(0, intervals - capacity), intervals)]


def test_the_registry_names_every_stage_once_and_the_timings():
    assert len(set(names())) == len(STAGES)
    assert {s.side for s in STAGES} == {"read", "worker", "trainer"}
    assert list(TIMINGS) == ["off", "stages", "trace"]
    with pytest.raises(KeyError, match="no stage 'nope'"):
        stage_index("nope")


def test_hand_overs_counted_inside_order_move_to_handoff_at_the_flush():
    """The worker's hand-overs are timed around each yield without a switch: at a flush they leave ``order``."""
    row = board_row()
    clock = StageClock(row)
    start = time.perf_counter()
    clock.restart()
    given = 0.0
    for _ in range(4):
        time.sleep(0.002)  # the item is made, in order
        before = time.perf_counter()
        time.sleep(0.005)  # the item is handed over
        given += time.perf_counter() - before
        clock.handed_over += time.perf_counter() - before
        clock.items += 1
    clock.close()
    wall = time.perf_counter() - start
    assert row[HANDOFF, SECONDS] == pytest.approx(given, rel=0.01)
    assert row[ORDER, SECONDS] >= 0.008 and row[ORDER, SECONDS] + row[HANDOFF, SECONDS] <= wall
    assert row[HANDOFF, CALLS] == 4


def test_a_wait_on_storage_inside_a_stage_becomes_read_wait_and_storage():
    """A remote manifest's rows fetched while the consumer plans: a wait on storage, not `order` (issue 32 §5)."""
    row = board_row()
    clock = StageClock(row)
    start = time.perf_counter()
    clock.restart()
    time.sleep(0.002)
    started = time.perf_counter()
    time.sleep(0.03)  # the fetch
    waited = time.perf_counter() - started
    clock.waited_on_storage(waited)
    clock.close()
    wall = time.perf_counter() - start
    read_wait = stage_index("read_wait")
    assert row[read_wait, SECONDS] == pytest.approx(waited) and row[STORAGE, SECONDS] == pytest.approx(waited)
    assert row[ORDER, SECONDS] >= 0.002 and row[ORDER, SECONDS] + waited <= wall


def test_a_relabelled_interval_is_counted_where_it_ended():
    row = board_row()
    clock = StageClock(row)
    clock.restart(stage_index("stall"))
    time.sleep(0.01)
    clock.relabel(stage_index("windup"))
    clock.close()
    assert row[stage_index("stall"), SECONDS] == 0 and row[stage_index("windup"), SECONDS] >= 0.01


def test_the_operations_guide_lists_every_stage_as_the_registry_says():
    """docs/operations.md's table of stages is the registry's, row for row (a new stage is documented)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `") and line.count(" | ") == 2]
    table = [(name.strip("|` "), side, what.rstrip(" |")) for name, side, what in rows]
    assert [row for row in table if row[0] in names()] == [(s.name, s.side, s.what) for s in STAGES]


def test_a_clock_counts_nothing_of_its_consumer_until_a_pass_restarts_it():
    """to_device carves its copy out of the trainer's clock without watch(): only the copy counts, not `order`."""
    row = board_row()
    clock = StageClock(row)
    time.sleep(0.01)
    left = clock.switch(stage_index("to_device"))
    time.sleep(0.005)
    clock.switch(left)
    time.sleep(0.01)
    clock.close()
    assert row[stage_index("to_device"), SECONDS] >= 0.005
    assert row[:, SECONDS].sum() == row[stage_index("to_device"), SECONDS]

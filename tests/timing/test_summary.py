"""The pure summaries of a board: a worker's path adds up to its wall time, read_wait goes to the read stages, the
verdict and the straggler (issue 32 §1)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.timing.stages import FIELDS, STAGES
from corgi_io.timing.summary import (as_table, busy, rank_path, slowest_stage, stall_share, straggler,
                                     straggler_line, verdict, worker_path)

S = {s.name: i for i, s in enumerate(STAGES)}
WORKER_STAGES = [s.name for s in STAGES if s.side == "worker"]
READ_STAGES = ["storage", "cache_hit", "cache_miss", "verify", "split"]


def row(**seconds) -> np.ndarray:
    out = np.zeros((len(STAGES), len(FIELDS)))
    for name, value in seconds.items():
        out[S[name], 0] = value
    return out


seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(WORKER_STAGES + READ_STAGES + ["first_byte", "stall"]), seconds))
def test_a_workers_path_adds_up_to_its_consumers_wall_time(times):
    """The consumer's stages partition its wall time; sharing read_wait out to the read stages keeps the sum."""
    path = worker_path(row(**times))
    wall = sum(v for k, v in times.items() if k in WORKER_STAGES)
    assert path.sum() == pytest.approx(wall, rel=1e-9, abs=1e-9)
    assert path[S["stall"]] == 0 and path[S["first_byte"]] == 0
    if any(times.get(k, 0) > 0 for k in READ_STAGES):
        assert path[S["read_wait"]] == 0


def test_read_wait_goes_to_the_read_stages_by_their_thread_time():
    path = worker_path(row(read_wait=10.0, storage=30.0, verify=10.0, decode=1.0))
    assert path[S["storage"]] == pytest.approx(7.5) and path[S["verify"]] == pytest.approx(2.5)
    assert path[S["decode"]] == 1.0


def test_a_ranks_path_averages_the_workers_that_ran_and_keeps_the_trainers_time():
    board = np.stack([row(stall=4.0, step=6.0), row(decode=2.0, handoff=1.0), row(decode=4.0, handoff=3.0),
                      row()])
    path = rank_path(board)
    assert path[S["decode"]] == 3.0 and path[S["handoff"]] == 2.0
    assert path[S["stall"]] == 4.0 and path[S["step"]] == 6.0
    assert busy(path) == 3.0


def test_the_verdict_says_keeps_up_or_data_bound_and_where():
    slow_decode = rank_path(row(decode=8.0, order=1.0, handoff=1.0, stall=30.0, step=70.0)[None])
    assert verdict(slow_decode).startswith("data-bound by 30%")
    assert "decode 89%" in verdict(slow_decode)
    fine = rank_path(row(decode=1.0, handoff=9.0, stall=1.0, step=99.0)[None])
    assert verdict(fine).startswith("keeps up: the training loop waited for data 1.0%")
    assert stall_share(rank_path(row(decode=1.0)[None])) is None
    assert verdict(rank_path(row(decode=1.0, handoff=3.0)[None])).startswith("no training loop watched")


def test_the_slowest_stage_ignores_handoff_and_the_trainer():
    assert slowest_stage(rank_path(row(handoff=100.0, stall=50.0, transform=2.0, decode=1.0)[None]))[0] == "transform"
    assert slowest_stage(np.zeros(len(STAGES))) == ("", 0.0)


def test_the_straggler_is_the_rank_of_most_busy_time_named_with_its_slowest_stage():
    paths = np.array([rank_path(row(decode=1.0, handoff=5.0)[None]),
                      rank_path(row(decode=1.0, transform=3.0)[None]),
                      rank_path(row(decode=1.2, handoff=4.0)[None])])
    found = straggler(paths)
    assert found["rank"] == 1 and found["stage"] == "transform"
    assert found["vs_median"] == pytest.approx(4.0 / 1.2)
    assert straggler_line(found) == "rank 1: transform 75% of its time, 3.33x the median rank"
    assert straggler(paths[:1]) is None and "no straggler" in straggler_line(None)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(seconds, min_size=3, max_size=3), min_size=2, max_size=16))
def test_the_straggler_has_the_most_busy_time_of_all_ranks(loads):
    paths = np.array([rank_path(row(storage=a, read_wait=a, decode=b, handoff=c)[None]) for a, b, c in loads])
    found = straggler(paths)
    busy_times = [busy(p) for p in paths]
    if found is None:
        assert np.median(busy_times) <= 0
    else:
        assert busy_times[found["rank"]] == max(busy_times) and found["vs_median"] >= 1.0


def test_a_table_holds_the_stages_that_ran_as_plain_numbers():
    r = row(decode=1.5)
    r[S["storage"]] = (2.0, 100, 4, 3)
    table = as_table(r)
    assert table == {"storage": {"seconds": 2.0, "bytes": 100, "samples": 4, "calls": 3},
                     "decode": {"seconds": 1.5, "bytes": 0, "samples": 0, "calls": 0}}
    assert isinstance(table["storage"]["bytes"], int)

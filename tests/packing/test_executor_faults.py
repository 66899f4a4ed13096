"""The local pool executor when a worker dies, hangs or breaks the pool (issue 28's review of executors.py).

Every case is made deterministic: the task stream waits until the pool is broken, a worker kills itself at the
point under test, or a result cannot be loaded by the driver.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from corgi_io.errors import PackError
from corgi_io.packing.executors import LocalExecutor


@dataclass(frozen=True)
class Job:
    """A task of these tests: `path` names it, `action` says what the worker does."""

    path: str
    action: str = "ok"


def _refuse_to_load():
    raise ValueError("this result cannot be loaded")


class Unloadable:
    """A result that pickles in the worker but whose loading in the driver raises."""

    def __reduce__(self):
        return _refuse_to_load, ()


def act(job: Job):
    """What a worker does with `job`."""
    if job.action == "exit":
        os._exit(3)
    if job.action == "unloadable":
        return Unloadable()
    return job.path


def once_the_pool_broke(executor: LocalExecutor, first: Job, later: Job):
    """`first`, then `later` only once the pool is broken: the executor submits it to a broken pool."""
    yield first
    deadline = time.monotonic() + 60
    while not executor._pool._broken and time.monotonic() < deadline:  # the pool's own flag, set by its manager
        time.sleep(0.01)
    yield later


@pytest.mark.slow
def test_a_submit_to_a_pool_already_broken_names_the_dead_worker_in_one_line():
    with LocalExecutor(2) as executor, pytest.raises(PackError) as raised:
        list(executor.run(act, once_the_pool_broke(executor, Job("dies.txt", "exit"), Job("fine.txt")), None))
    message = str(raised.value)
    assert message.startswith("dies.txt: worker process ") and "exited with code 3" in message, message
    assert "\n" not in message


@pytest.mark.slow
def test_a_pool_broken_by_a_result_it_cannot_load_names_the_cause_not_a_worker_none():
    with LocalExecutor(2) as executor, pytest.raises(PackError) as raised:
        list(executor.run(act, [Job("odd.txt", "unloadable")], None))
    message = str(raised.value)
    assert message.startswith("the worker pool broke: ") and "ValueError: this result cannot be loaded" in message
    assert "None" not in message and "\n" not in message, message


KILLED_IN_REPORT = """
import os, signal
from dataclasses import dataclass
from corgi_io.errors import PackError
from corgi_io.packing.executors import LocalExecutor, report

@dataclass(frozen=True)
class Job:
    path: str

class KilledMidAdd:
    '''A count whose addition kills its worker: a SIGKILL (--map-timeout's, an OOM kill) inside report().'''
    def __radd__(self, other):
        os.kill(os.getpid(), signal.SIGKILL)

def job(task):
    report(KilledMidAdd() if task.path == "killed.txt" else 1, 0)
    return task.path

with LocalExecutor(2) as executor:
    try:
        list(executor.run(job, [Job("fine.txt"), Job("killed.txt"), Job("fine2.txt")], lambda *counts: None))
    except PackError as exc:
        print(exc)
"""


@pytest.mark.slow
def test_a_worker_killed_while_it_reports_progress_never_hangs_the_driver():
    try:
        run = subprocess.run([sys.executable, "-c", KILLED_IN_REPORT], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the driver hung: the worker died inside report(), holding a lock the driver waits on")
    assert run.stdout.startswith("killed.txt: worker process ") and "SIGKILL" in run.stdout, run.stdout + run.stderr


def test_a_hash_task_is_named_by_what_it_reads_not_by_the_file_it_writes(tmp_path):
    from corgi_io.packing.dedup_pass import HashTask
    from corgi_io.packing.sources.folder import FolderShard
    from corgi_io.packing.sources.stream_unit import StreamUnit
    from corgi_io.packing.sources.unit_list import Unit
    from corgi_io.packing.table import Table

    out = str(tmp_path / "hash-000003.npy")
    assert HashTask(out, StreamUnit(3, Unit("wds", "/data/part-003.tar"), {}), None).path == "/data/part-003.tar"
    assert HashTask(out, StreamUnit(3, Unit("parquet", "/data/t.parquet", part=2), {}), None).path == (
        "/data/t.parquet (row group 2)")
    shard = FolderShard("shard-000003.tar", Table("rows", "strings"), (4096, 6000, 8192), "/data/images", ("jpg",))
    assert HashTask(out, shard, None).path == "/data/images (samples 4,096 to 8,191 of the pack order)"


def test_the_output_rules_a_shard_task_carries_hold_no_pack_options():
    import pickle

    from corgi_io.packing import PackOptions
    from corgi_io.packing.sample_rules import OutputRules

    rules = OutputRules.of(PackOptions(image_max_side=64, image_format="jpeg", max_pixels=1000))
    assert b"PackOptions" not in pickle.dumps(rules)
    assert (rules.image_format, rules.max_pixels) == ("jpeg", 1000)


# --- issue 28 review of the pack executors: progress across runs, the sample a reader dies on, a crash line that
# cannot itself fail, the board's slots -------------------------------------------------------------------------


def counted(job: Job):
    """One sample of 10 bytes reported per task."""
    from corgi_io.packing.executors import report

    report(1, 10)
    return job.path


@pytest.mark.slow
def test_a_second_run_on_one_pool_relays_only_its_own_progress():
    """A --dedup hash pass, then the write phase, on one pool: the board's totals hold both."""
    with LocalExecutor(2) as executor:
        runs = []
        for _ in range(2):
            heard = []
            list(executor.run(counted, [Job(f"{i}.txt") for i in range(25)], lambda *counts: heard.append(counts)))
            runs.append(tuple(map(sum, zip(*heard))))
    assert runs == [(25, 250), (25, 250)]


@dataclass(frozen=True)
class Unnameable:
    """A task whose sample cannot be named: the table ShardTask.sample_at reads is gone or garbled."""

    path: str
    error: str

    def sample_at(self, position: int) -> str:
        if self.error == "OSError":
            raise OSError(5, "Input/output error")
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


def dies_on_its_first_sample(task):
    from corgi_io.packing.executors import sample_marker

    sample_marker()(0)
    os._exit(3)


@pytest.mark.slow
@pytest.mark.parametrize("error", ["OSError", "UnicodeDecodeError"])
def test_a_dead_worker_whose_sample_cannot_be_named_is_named_by_its_task_in_one_line(error):
    with LocalExecutor(1, isolate=True) as executor, pytest.raises(PackError) as raised:
        list(executor.run(dies_on_its_first_sample, [Unnameable("table-of-shard-7", error)], None))
    message = str(raised.value)
    assert message.startswith("table-of-shard-7: worker process ") and "exited with code 3" in message, message
    assert "\n" not in message


@pytest.mark.slow
def test_a_worker_that_dies_inside_the_reader_names_the_sample_being_read(tmp_path, monkeypatch):
    """The reader (pyarrow, a tar) dies decoding sample #2 of a unit (an OOM kill, a segfault): that sample is
    named, not #1, the last one it finished.  The death is injected into the real reader's stream in the workers
    (forked after the patch); the driver never dies."""
    from corgi_io.packing import PackOptions, pack
    from corgi_io.packing.sources import stream_unit as stream
    from helpers.source_shards import write_tars

    write_tars(tmp_path / "src", tars=1, per_tar=6)
    driver, real = os.getpid(), stream.read_unit

    def dies_reading_the_third(unit, **options):
        for number, sample in enumerate(real(unit, **options)):
            if number == 2 and os.getpid() != driver:
                os._exit(9)
            yield sample

    monkeypatch.setattr(stream, "read_unit", dies_reading_the_third)
    with pytest.raises(PackError) as raised:
        pack(tmp_path / "src", tmp_path / "out", PackOptions(), workers=2, progress=False)
    message = str(raised.value)
    assert message.startswith("sample #2 of ") and "part-000.tar" in message and "exited with code 9" in message, \
        message


def test_a_board_with_no_free_slot_refuses_a_claim():
    import multiprocessing

    from corgi_io.processes import WorkerBoard

    board = WorkerBoard(1, multiprocessing.get_context("fork"))
    board.claim()
    with pytest.raises(PackError, match="no free slot on a board of 1 workers"):
        board.claim()

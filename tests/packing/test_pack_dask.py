"""`corgi pack` on Dask distributed: the same bytes as a local pack, resume after a killed driver, and a
worker SIGKILLed mid-shard on a real scheduler and workers started as separate processes on 127.0.0.1."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import types
from collections import Counter
from pathlib import Path

import pytest

from corgi_io.storage.atomic import temp_name
from corgi_io.packing import PackOptions, pack
from helpers.corpus_factory import write_text
from helpers.processes import CLI, SLOW_SIZES  # SLOW_SIZES: tokens(path) sleeps CORGI_TEST_SLEEP s per file

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'corgi-io[dask]'")
import dask  # noqa: E402  (installed with distributed)
pytestmark = pytest.mark.slow  # starts Dask clusters, launches and kills processes

OPTIONS = PackOptions(format="wds", block_samples=2, shard_bytes=6 << 10)
FLAGS = ("--format", "wds", "--block-samples", "2", "--shard-bytes", "6k")  # OPTIONS on the command line
SLOW = ("--size-fn", "corgi_test_dask_sizes:tokens")  # sleeps CORGI_TEST_SLEEP seconds per file
SLOW_OPTIONS = dataclasses.replace(OPTIONS, size_fn=SLOW[1])
HELPERS = SLOW_SIZES + '''
def fails(task):
    with open(os.environ["CORGI_TEST_ATTEMPTS"], "a") as f:
        f.write(task.path + "\\n")
    raise RuntimeError("task exploded\\nsecond line")

def dies(task):
    os._exit(1)
'''


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    """The environment of processes that can import corgi_test_dask_sizes (this one can too, meanwhile)."""
    mods = tmp_path_factory.mktemp("mods")
    (mods / "corgi_test_dask_sizes.py").write_text(HELPERS)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(mods))
        yield dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def client(helpers, tmp_path_factory):
    """A real LocalCluster of 2 worker processes, one thread each, and its Client (workers can import the helpers);
    a task is failed after 2 of its workers died (allowed-failures 1, so that the test of it is quick)."""
    attempts = tmp_path_factory.mktemp("attempts") / "attempts.txt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", helpers["PYTHONPATH"])  # the worker processes inherit it
        patch.setenv("CORGI_TEST_ATTEMPTS", str(attempts))
        with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
                distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster, \
                distributed.Client(cluster) as dask_client:
            dask_client.attempts = attempts
            yield dask_client


def environment(helpers: dict, **extra) -> dict:
    """This process's environment now (SOURCE_DATE_EPOCH included), with the helpers' PYTHONPATH and `extra`."""
    return dict(os.environ, PYTHONPATH=helpers["PYTHONPATH"], **extra)


@pytest.fixture
def fixed_clock(monkeypatch):
    """Both packs stamp the same `created` time, so whole manifests can be compared byte for byte."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def make_corpus(root: Path, n: int) -> list:
    """n small text files in 4 classes; returns their keys."""
    for i in range(n):
        write_text(root / f"c{i % 4}/doc_{i:03d}.txt", 40 + i % 50, seed=i)
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.txt"))


def all_files(out: Path) -> dict:
    """{relative path: bytes} of every file under OUTPUT, hidden ones included."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def temporaries(out: Path) -> list:
    return sorted(p.name for p in out.rglob(temp_name("*", "*")))


def tar_keys(out: Path) -> list:
    """Every sample key in the tar shards, read with the standard library (one per sample)."""
    keys = []
    for shard in sorted(out.glob("shard-*.tar")):
        with tarfile.open(shard) as tar:
            keys += [m.name.rsplit(".", 1)[0] for m in tar.getmembers() if not m.name.endswith(".cls")]
    return keys


def assert_same_pack(out: Path, reference: Path) -> None:
    """Every file (shards, manifest head, manifest columns) is byte-identical; nothing more, nothing less."""
    got, want = all_files(out), all_files(reference)
    assert sorted(got) == sorted(want)
    assert [name for name in got if got[name] != want[name]] == []
    assert sum(name.startswith("shard-") for name in got) > 2


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_dask_pack_is_the_local_pack_byte_for_byte(client, mixed_corpus, fixed_clock, tmp_path, fmt):
    root, _ = mixed_corpus
    options = PackOptions(format=fmt, block_samples=3, block_bytes=24 << 10, shard_bytes=40 << 10)
    local = pack(root, tmp_path / "local", options, workers=2)
    on_dask = pack(root, tmp_path / "dask", options, client=client)
    assert on_dask.num_samples == local.num_samples > 10
    assert_same_pack(tmp_path / "dask", tmp_path / "local")


def test_dask_pack_of_tars_with_dedup_is_the_local_pack_byte_for_byte(client, fixed_clock, tmp_path):
    import webdataset

    (tmp_path / "tars").mkdir()
    for t in range(3):
        with webdataset.TarWriter(str(tmp_path / "tars" / f"{t}.tar")) as writer:
            for i in range(40):
                writer.write({"__key__": f"{t}-{i:03d}", "txt": f"sample {i % 25} " .encode() * 50, "cls": b"1"})
    options = PackOptions(block_samples=3, shard_bytes=8 << 10, dedup=True)
    local = pack(str(tmp_path / "tars"), tmp_path / "local", options, workers=2)
    on_dask = pack(str(tmp_path / "tars"), tmp_path / "dask", options, client=client)
    assert on_dask.num_samples == local.num_samples == 25
    assert_same_pack(tmp_path / "dask", tmp_path / "local")


def test_task_that_keeps_failing_raises_pack_error_naming_its_shard_after_its_retries(client):
    from corgi_io.errors import PackError
    from corgi_io.packing.dask_executor import RETRIES, DaskExecutor
    from corgi_test_dask_sizes import fails

    tasks = [types.SimpleNamespace(path="/out/shard-000007.tar")]
    with pytest.raises(PackError, match=r"^/out/shard-000007\.tar: RuntimeError: task exploded \(failed 3 times"), \
            DaskExecutor(client) as executor:
        list(executor.run(fails, tasks))
    attempts = client.attempts.read_text().splitlines()
    assert attempts == ["/out/shard-000007.tar"] * (RETRIES + 1) == ["/out/shard-000007.tar"] * 3  # Dask reran it


def test_task_whose_workers_keep_dying_raises_pack_error_naming_its_shard(client):
    from corgi_io.errors import PackError
    from corgi_io.packing.dask_executor import DaskExecutor
    from corgi_test_dask_sizes import dies

    tasks = [types.SimpleNamespace(path="/out/shard-000003.tar")]
    with pytest.raises(PackError, match=r"^/out/shard-000003\.tar: 2 Dask workers died while writing it"), \
            DaskExecutor(client) as executor:
        list(executor.run(dies, tasks))
    client.wait_for_workers(2, timeout=30)  # the nannies restart them for the tests that follow


def test_cli_dask_local_cluster(corgi, fixed_clock, tmp_path):
    keys = make_corpus(tmp_path / "src", 24)
    assert corgi("pack", tmp_path / "src", tmp_path / "local", *FLAGS, "--workers", 1).exit_code == 0
    result = corgi("pack", tmp_path / "src", tmp_path / "dask", *FLAGS, "--dask", "local:2")
    assert result.exit_code == 0, result.output
    assert "packed 24 samples" in result.stdout
    assert sorted(tar_keys(tmp_path / "dask")) == keys
    assert_same_pack(tmp_path / "dask", tmp_path / "local")


def test_cli_dask_refuses_workers_and_bad_addresses(corgi, tmp_path):
    make_corpus(tmp_path / "src", 2)
    both = corgi("pack", tmp_path / "src", tmp_path / "out", "--dask", "local:2", "--workers", 2)
    assert both.exit_code == 2 and "--workers sizes the local pool" in both.stderr
    for bad in ("lokal", "local:0", "local:x", "host:8786"):
        result = corgi("pack", tmp_path / "src", tmp_path / "out", "--dask", bad)
        assert result.exit_code == 2 and "is neither local, local:N nor a scheduler address" in result.stderr, bad
    assert not (tmp_path / "out").exists()


def test_plain_pack_never_imports_dask(tmp_path):
    make_corpus(tmp_path / "src", 4)
    code = (f"import sys; from corgi_io.cli import main; main(['pack', {str(tmp_path / 'src')!r}, "
            f"{str(tmp_path / 'out')!r}, '--workers', '2'], standalone_mode=False); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "manifest.json").exists()


# --- a killed driver, then the same command again --------------------------------------------------

def finished_shards(out: Path) -> dict:
    """{shard name: (inode, mtime_ns)} of the shards under their final names."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("shard-*.tar")}


def test_driver_killed_mid_pack_then_rerun_keeps_finished_shards(client, helpers, fixed_clock, tmp_path):
    keys = make_corpus(tmp_path / "src", 40)
    pack(tmp_path / "src", tmp_path / "reference", SLOW_OPTIONS)
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", CLI, "pack", str(tmp_path / "src"), str(out), *FLAGS, *SLOW, "--dask", "local:2"]
    driver = subprocess.Popen(cmd, env=environment(helpers, CORGI_TEST_SLEEP="0.05"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: len(finished_shards(out)) >= 2, driver, timeout=25)
        driver.kill()  # the driver alone, as `kill -9 PID` would
        driver.wait()
    finally:
        stop_group(driver)
    kept = finished_shards(out)
    assert 2 <= len(kept) < len(list((tmp_path / "reference").glob("shard-*"))), "killed too late to tell"
    assert not (out / "manifest.json").exists()
    pack(tmp_path / "src", out, SLOW_OPTIONS, client=client)
    assert {name: finished_shards(out)[name] for name in kept} == kept  # not rewritten
    assert sorted(tar_keys(out)) == keys and temporaries(out) == []
    assert_same_pack(out, tmp_path / "reference")


def wait_for(ready, process, timeout: float) -> None:
    """Poll until ready(); fail if `process` ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            said = process.stderr.read()[-2000:] if process.stderr else b""
            pytest.fail(f"the process ended first ({process.returncode}): {said!r}")
        if time.monotonic() > deadline:
            pytest.fail(f"not ready after {timeout} s")
        time.sleep(0.005)


def stop_group(process) -> None:
    """SIGKILL a process we started in its own session, and whatever it started (a LocalCluster's workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    if process.stderr:
        process.stderr.close()


# --- a worker SIGKILLed mid-shard on a scheduler and workers started as separate processes ------------

@pytest.fixture
def separate_cluster(helpers, tmp_path):
    """(scheduler address, {pid: worker process}): `dask scheduler` and two `dask worker --no-nanny` on
    127.0.0.1, each its own process, so that SIGKILL of a worker is the real loss of a machine's worker."""
    env = environment(helpers, CORGI_TEST_SLEEP="0.04")
    scheduler_file, logs = tmp_path / "scheduler.json", tmp_path / "dask.log"
    dask = [sys.executable, "-m", "dask"]
    with open(logs, "ab") as log:
        started = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                     "--scheduler-file", str(scheduler_file)], env=env, stderr=log,
                                    start_new_session=True)]
    try:
        wait_for(lambda: scheduler_file.exists() and scheduler_file.stat().st_size > 0, started[0], timeout=30)
        for n in range(2):
            with open(logs, "ab") as log:
                started.append(subprocess.Popen([*dask, "worker", "--scheduler-file", str(scheduler_file),
                                                 "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                                 "--local-directory", str(tmp_path / f"w{n}")],
                                                env=env, stderr=log, start_new_session=True))
        with distributed.Client(scheduler_file=str(scheduler_file), timeout=30) as probe:
            probe.wait_for_workers(2, timeout=30)
        yield json.loads(scheduler_file.read_text())["address"], {p.pid: p for p in started[1:]}
    finally:
        for process in reversed(started):
            stop_group(process)


def test_worker_killed_mid_shard_is_retried_and_every_sample_lands_once(separate_cluster, helpers, fixed_clock,
                                                                         corgi, tmp_path):
    address, workers = separate_cluster
    keys = make_corpus(tmp_path / "src", 40)
    pack(tmp_path / "src", tmp_path / "reference", SLOW_OPTIONS)
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", CLI, "pack", str(tmp_path / "src"), str(out), *FLAGS, *SLOW, "--dask", address]
    driver = subprocess.Popen(cmd, env=environment(helpers), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        victim = []  # (worker pid, its temporary shard): a shard being written, by the worker whose pid it names

        def writing():
            for temp in out.glob(temp_name("shard-*", "*")):
                pid = int(re.search(r"-(\d+)-[0-9a-f]+$", temp.name).group(1))
                if pid in workers and finished_shards(out):
                    victim.append((pid, temp))
                    return True
            return False
        wait_for(writing, driver, timeout=30)
        pid, temp = victim[0]
        os.kill(pid, signal.SIGKILL)
        assert workers[pid].wait(timeout=10) == -signal.SIGKILL
        assert temp.exists(), "the worker had finished that shard: it was not killed mid-task"
        assert driver.wait(timeout=60) == 0, driver.stderr.read()
    finally:
        stop_group(driver)
    assert not temp.exists() and temporaries(out) == []
    shard_keys = tar_keys(out)
    assert [key for key, seen in Counter(shard_keys).items() if seen > 1] == []
    assert sorted(shard_keys) == keys
    assert_same_pack(out, tmp_path / "reference")
    result = corgi("verify", out)
    assert result.exit_code == 0, result.output

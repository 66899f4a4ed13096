"""One writer per OUTPUT: a second `corgi pack` into an OUTPUT that a live run holds stops at once, in one line
that names the holder, and changes nothing; a holder killed with SIGKILL does not block the next run.

The races are made deterministic with a --size-fn that waits for a gate file: the first pack takes the
lock, walks, plans and then blocks on its first sample, until the test has run the second pack to its end.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corgi_io import open_manifest, verify
from corgi_io.storage.locks import LOCK_NAME, FolderLock
from helpers.corpus_factory import write_text
from helpers.processes import alive
from helpers.packs import all_files

CLI = "import sys; from corgi_io.cli import main; sys.exit(main())"
EPOCH = "1700000000"  # SOURCE_DATE_EPOCH: identical manifests from every run
GATED_SIZES = '''
import os, time

def tokens(path):
    gate, deadline = os.environ.get("CORGI_TEST_GATE"), time.monotonic() + 60
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(path, "rb") as f:
        return len(f.read().decode("utf-8").split())
'''
GATED = ("--size-fn", "corgi_test_gated_sizes:tokens", "--workers", "1")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """16 small text files in 4 classes."""
    root = tmp_path_factory.mktemp("lock") / "corpus"
    for i in range(16):
        write_text(root / f"c{i % 4}/doc_{i:02d}.txt", 30 + 7 * i, seed=i)
    return root


@pytest.fixture
def gated(tmp_path, monkeypatch, write_user_module):
    """(environment for `corgi pack` subprocesses whose --size-fn waits for the gate, the gate file); the size
    function is importable in this process too, and SOURCE_DATE_EPOCH is set for both."""
    mods = write_user_module("corgi_test_gated_sizes", GATED_SIZES)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    path = os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")]))
    gate = tmp_path / "gate"
    return dict(os.environ, PYTHONPATH=path, CORGI_TEST_GATE=str(gate)), gate


def start_holder(source: Path, out: Path, env: dict, *options) -> subprocess.Popen:
    """A `corgi pack` subprocess, returned once it holds OUTPUT's lock and is blocked on the gate (its first shard's
    temporary file exists, and its --size-fn waits before any byte of it is written)."""
    cmd = [sys.executable, "-c", CLI, "pack", str(source), str(out), *options, *GATED]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (holder_details(out) and any(out.glob(".shard-000000.*.tmp-*"))):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the pack took no lock in 60 s"
        time.sleep(0.01)
    assert holder_details(out)["pid"] == proc.pid
    return proc


def holder_details(out: Path):
    try:
        return json.loads((out / LOCK_NAME).read_bytes())
    except (OSError, ValueError):
        return None


def snapshot(out: Path) -> dict:
    """{name: (inode, size, mtime)} of everything in OUTPUT, hidden entries included."""
    return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*")}


def assert_one_pack(corgi, out: Path, reference: Path) -> None:
    """OUTPUT holds exactly the files of `reference` (no lock, no leftovers), byte for byte, and verifies."""
    assert all_files(out) == all_files(reference)
    assert verify(open_manifest(out)).ok


PAIRS = {  # (options of the holder, options of the second run, options of a pack already in OUTPUT or None)
    "the same command twice": (("--format", "wds"), ("--format", "wds"), None),
    "wds against tfrecord": (("--format", "wds"), ("--format", "tfrecord"), None),
    "two --overwrite with other block sizes": (("--overwrite", "--block-samples", "2"),
                                               ("--overwrite", "--block-samples", "3"), ("--block-samples", "5")),
}


@pytest.mark.slow  # starts `corgi pack` processes
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_a_second_pack_into_a_held_output_stops_at_once(source, tmp_path, gated, corgi, pair):
    env, gate = gated
    first, second, earlier = PAIRS[pair]
    out, reference = tmp_path / "out", tmp_path / "reference"
    gate.touch()  # the in-process packs do not wait
    assert corgi("pack", source, reference, *first, *GATED).exit_code == 0
    if earlier:
        assert corgi("pack", source, out, *earlier, *GATED).exit_code == 0
    gate.unlink()
    holder = start_holder(source, out, env, *first)
    try:
        before = snapshot(out)
        loser = subprocess.run([sys.executable, "-c", CLI, "pack", str(source), str(out), *second, *GATED], env=env,
                               capture_output=True, text=True, timeout=120)
        assert holder.poll() is None, "the holder ended before the second run was refused"
        assert snapshot(out) == before, "the refused run changed OUTPUT"
    finally:
        gate.touch()
        stdout, stderr = holder.communicate(timeout=120)
    lines = loser.stderr.strip().splitlines()
    assert loser.returncode == 1 and len(lines) == 1, loser.stderr
    assert f"another corgi pack is writing it (host {socket.gethostname()}, pid {holder.pid}, started " in lines[0]
    assert holder.returncode == 0, stderr
    assert_one_pack(corgi, out, reference)


@pytest.mark.slow  # starts and kills a `corgi pack` process
def test_a_holder_killed_by_sigkill_does_not_block_the_next_run(source, tmp_path, gated, corgi):
    env, gate = gated
    out, reference = tmp_path / "out", tmp_path / "reference"
    holder = start_holder(source, out, env)
    details = holder_details(out)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=60)
    assert holder.returncode == -signal.SIGKILL and (out / LOCK_NAME).exists()
    gate.touch()
    result = corgi("pack", source, out, *GATED)
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"corgi pack: warning: {out / LOCK_NAME}: removed the lock of a run that is gone (host {details['host']}, "
        f"pid {holder.pid}, started {details['started']})"], result.stderr
    assert corgi("pack", source, reference, *GATED).exit_code == 0
    assert_one_pack(corgi, out, reference)


# --- lock files built directly, and a lock held by this process -------------------------------------

def write_lock(out: Path, **details) -> None:
    out.mkdir()
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": "2024-01-02T03:04:05Z"}
    (out / LOCK_NAME).write_text(json.dumps(dict(holder, **details)))


def refused(corgi, source: Path, out: Path) -> str:
    """The one line of a pack into `out` that must be refused without changing anything there."""
    before = snapshot(out)
    result = corgi("pack", source, out, "--workers", "1")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert snapshot(out) == before, "the refused run changed OUTPUT"
    return lines[0]


def test_a_lock_held_in_this_process_refuses(source, tmp_path, corgi):
    out = tmp_path / "out"
    out.mkdir()
    with FolderLock(out, print):
        line = refused(corgi, source, out)
    assert f"{out}: another corgi pack is writing it (host {socket.gethostname()}, pid {os.getpid()}, " in line
    assert "wait for it to finish" in line
    assert not (out / LOCK_NAME).exists(), "the lock file outlived its holder"


def test_a_holder_on_another_host_refuses_and_says_how_to_clear_it(source, tmp_path, corgi):
    out = tmp_path / "out"
    write_lock(out, host="node-17.cluster", pid=4242)
    line = refused(corgi, source, out)
    assert "(host node-17.cluster, pid 4242, started 2024-01-02T03:04:05Z)" in line
    assert line.endswith(f"if that run is gone, delete {out / LOCK_NAME}")


@pytest.mark.parametrize("content", ["", "{", '{"host": "a\nb", "pid": 1, "started": "x"}', '["host"]'])
def test_a_lock_naming_no_holder_refuses(source, tmp_path, corgi, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(content)
    line = refused(corgi, source, out)
    assert line == f"Error: {out}: another corgi pack holds it (its lock names no holder); if none is running, " \
                   f"delete {out / LOCK_NAME}"


def test_a_lock_nobody_holds_on_this_host_is_removed(source, tmp_path, corgi):
    """Its flock is free, so its run is gone, though its pid (reused: here our parent's) still runs."""
    out = tmp_path / "out"
    write_lock(out, pid=os.getppid())
    result = corgi("pack", source, out, "--workers", "1")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"corgi pack: warning: {out / LOCK_NAME}: removed the lock of a run that is gone")
    assert not (out / LOCK_NAME).exists() and open_manifest(out).num_samples == 16


def test_without_hard_links_the_lock_is_made_in_place(source, tmp_path, corgi, monkeypatch):
    def no_links(*args):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))
    monkeypatch.setattr(os, "link", no_links)
    out = tmp_path / "out"
    out.mkdir()
    with FolderLock(out, print):
        assert holder_details(out)["pid"] == os.getpid()
        assert [p.name for p in out.iterdir()] == [LOCK_NAME], "a temporary file stayed"
        assert "another corgi pack is writing it" in refused(corgi, source, out)
    assert not any(out.iterdir())


HOLDER_WITH_A_WORKER = '''
import os, sys, time
from corgi_io.storage.locks import FolderLock

FolderLock(sys.argv[1], print).acquire()
worker = os.fork()
if worker == 0:
    for stream in (1, 2):  # not holding the test's pipes open
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream)
    time.sleep(120)
    os._exit(0)
print(worker, flush=True)
os._exit(0)  # gone without releasing; its worker shares the flock
'''


@pytest.mark.slow  # starts processes
def test_the_workers_of_a_dead_holder_keep_the_lock_until_they_end(source, tmp_path, corgi):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.run([sys.executable, "-c", HOLDER_WITH_A_WORKER, str(out)], capture_output=True, text=True,
                            timeout=60, check=True)
    worker = int(holder.stdout)
    try:
        line = refused(corgi, source, out)
        assert f"pid {holder_details(out)['pid']}, " in line and "another corgi pack is writing it" in line
    finally:
        os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.01)
    result = corgi("pack", source, out, "--workers", "1")
    assert result.exit_code == 0 and "removed the lock of a run that is gone" in result.stderr, result.output

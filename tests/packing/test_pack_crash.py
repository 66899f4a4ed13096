"""`corgi pack` survives a crash at any moment: kill -9, a full disk, a dead parent of the workers.

After every kill the same command is run again; it must complete with OUTPUT holding exactly
the files of an uninterrupted pack, byte for byte, every sample once (counted through the
manifest and through `tarfile`), and `corgi verify` passing.  Kill points come from three sweeps:

* `corgi pack` subprocesses killed when OUTPUT, `.corgi-partial/`, a shard or the manifest
  appears, or at a delay after `.corgi-partial/` appears (the moments an operator hits);
* forked packs killed just before each of their file-system operations in turn (mkdir, rename,
  replace, unlink, rmdir, fsync), which reaches every step of set-up, writing, manifest and
  clean-up deterministically;
* the states that older versions (or a kill inside one operation) leave, built directly.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from corgi_io.manifest import open_manifest
from helpers.corpus_factory import write_text
from helpers.processes import CLI, SLOW_SIZES, alive, children
from helpers.processes import pack_killed_before_op as fork_pack_killed_before_op

pytestmark = pytest.mark.slow  # launches, forks and kills packs

OPTIONS = ("--format", "wds", "--block-samples", "2", "--shard-bytes", "16k")


class Case(NamedTuple):
    """A corpus, its samples ({key: file bytes}) and the OUTPUT of an uninterrupted pack of it."""

    root: Path
    samples: dict
    reference: Path


def make_corpus(root: Path, n: int) -> dict:
    """n small text files in 4 classes; returns {key: file bytes}."""
    for i in range(n):
        write_text(root / f"c{i % 4}/doc_{i:03d}.txt", 20 + i % 50, seed=i)
    return {str(p.relative_to(root).with_suffix("")): p.read_bytes() for p in root.rglob("*.txt")}


def reference_pack(corgi, root: Path, out: Path, *options) -> Path:
    """An uninterrupted pack, to compare the resumed ones with."""
    result = corgi("pack", root, out, *options, "--workers", 1)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, corgi) -> Case:
    """24 small text files: 12 blocks in 4 shards."""
    base = tmp_path_factory.mktemp("crash")
    samples = make_corpus(base / "corpus", 24)
    return Case(base / "corpus", samples, reference_pack(corgi, base / "corpus", base / "reference", *OPTIONS))


@pytest.fixture(scope="module")
def slow_size_fn(tmp_path_factory):
    """(module folder, env): subprocesses can import corgi_test_crash_sizes:tokens, which sleeps per file."""
    mods = tmp_path_factory.mktemp("mods")
    (mods / "corgi_test_crash_sizes.py").write_text(SLOW_SIZES)
    return mods, dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")])))


def pack_command(root: Path, out: Path, workers: int, *extra) -> list:
    return [sys.executable, "-c", CLI, "pack", str(root), str(out), *OPTIONS, "--workers", str(workers), *extra]


def rerun(corgi, root: Path, out: Path, workers: int = 1, options=OPTIONS) -> None:
    """The same command again (in-process, for speed); it must succeed."""
    result = corgi("pack", root, out, *options, "--workers", workers)
    assert result.exit_code == 0, result.output


def tar_samples(shard: Path) -> list:
    """(key, payload bytes) of each sample in a tar shard, read with the standard library."""
    with tarfile.open(shard) as tar:
        return [(m.name.rsplit(".", 1)[0], tar.extractfile(m).read()) for m in tar.getmembers()
                if not m.name.endswith(".cls")]


def assert_complete(corgi, out: Path, case: Case) -> None:
    """OUTPUT is an uninterrupted pack: same files, same shard bytes, every sample exactly once, verified."""
    names = sorted(os.listdir(out))
    assert names == sorted(os.listdir(case.reference)), "leftovers or missing files in OUTPUT"
    manifest = open_manifest(out)
    assert sorted(manifest.keys()) == sorted(case.samples)
    from_tar = [sample for shard in manifest.shards for sample in tar_samples(out / shard.path)]
    assert sorted(from_tar) == sorted(case.samples.items())
    for name in names:
        if name.startswith("shard-"):
            assert (out / name).read_bytes() == (case.reference / name).read_bytes(), name
    result = corgi("verify", out)
    assert result.exit_code == 0, result.output


# --- kill -9 of `corgi pack` subprocesses ----------------------------------------------------------

def entry(out: Path, name: str):
    return lambda: (out / name).exists()


def delay_after_partial(out: Path, delay: float):
    seen = []

    def ready():
        if not seen and (out / ".corgi-partial").exists():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay
    return ready


KILL_POINTS = [  # (name, workers, trigger(out) -> ready())
    ("OUTPUT created", 1, lambda out: out.exists),
    ("anything in OUTPUT", 2, lambda out: lambda: out.exists() and any(out.iterdir())),
    *[(f".corgi-partial appears #{i}", 1 + i % 2, lambda out: entry(out, ".corgi-partial")) for i in range(4)],
    ("first shard finished", 2, lambda out: entry(out, "shard-000000.tar")),
    *[(f"{d:.2f} s after .corgi-partial", 1, lambda out, d=d: delay_after_partial(out, d))
      for d in (0.03, 0.1, 0.18)],  # the pack writes for about 0.25 s (24 files, 0.01 s each)
    ("columns/ appears", 1, lambda out: entry(out, "columns")),
    ("manifest.json appears", 2, lambda out: entry(out, "manifest.json")),
]


def kill_when(cmd, env, ready, timeout: float = 30.0) -> bool:
    """Run `cmd`, SIGKILL the pack process (alone, as `kill -9 PID` would) as soon as ready(); False if it
    ended first.  Its workers are then killed too, in case they outlived it."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                assert proc.returncode == 0, proc.stderr.read()
                return False
            if ready():
                proc.kill()
                return proc.wait() == -signal.SIGKILL
            time.sleep(0.0005)
        pytest.fail(f"the pack neither finished nor reached the kill point in {timeout} s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):  # workers die with the pack; this is only a safety net
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()


def test_kill_pack_command_at_many_points(corpus, slow_size_fn, corgi, tmp_path, monkeypatch):
    mods, env = slow_size_fn
    monkeypatch.syspath_prepend(mods)  # the in-process reruns import the --size-fn too
    slow = ("--size-fn", "corgi_test_crash_sizes:tokens")
    killed = []
    for i, (name, workers, trigger) in enumerate(KILL_POINTS):
        out = tmp_path / f"out{i}"
        cmd = pack_command(corpus.root, out, workers, *slow)
        if kill_when(cmd, dict(env, CORGI_TEST_SLEEP="0.01"), trigger(out)):
            killed.append(name)
        rerun(corgi, corpus.root, out, workers, (*OPTIONS, *slow))
        assert_complete(corgi, out, corpus)
    print(f"{len(killed)} of {len(KILL_POINTS)} kill points hit a running pack; all reruns completed; "
          f"missed: {sorted(set(name for name, _, _ in KILL_POINTS) - set(killed))}")
    assert len(killed) >= len(KILL_POINTS) - 2, f"only {killed} were killed"


# --- kill -9 before each file-system operation of a forked pack -----------------------------------

def pack_killed_before_op(root: Path, out: Path, op: int, workers: int) -> bool:
    """`corgi pack` of `root` into `out` killed just before its `op`-th file-system operation; True if killed."""
    return fork_pack_killed_before_op(["pack", str(root), str(out), *OPTIONS, "--workers", str(workers)], op)


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_before_every_file_operation(corpus, corgi, tmp_path, workers):
    for op in itertools.count(1):
        out = tmp_path / f"op{op}"
        was_killed = pack_killed_before_op(corpus.root, out, op, workers)
        if was_killed:
            rerun(corgi, corpus.root, out, workers)
        assert_complete(corgi, out, corpus)
        if not was_killed:
            break
    print(f"workers={workers}: killed before each of {op - 1} operations; all reruns completed")
    assert op > 30, "a pack of several shards makes more file-system operations than that"


# --- states built directly ------------------------------------------------------------------------

def plan_of(reference: Path) -> bytes:
    return json.dumps(json.loads((reference / "manifest.json").read_bytes())["options"]).encode()


def old_empty_partial(out, reference):
    (out / ".corgi-partial").mkdir(parents=True)


def old_temporary_plan_only(out, reference):
    (out / ".corgi-partial").mkdir(parents=True)
    (out / ".corgi-partial" / ".plan.json.tmp-4242").write_bytes(plan_of(reference)[:17])


def staging_partial(out, reference):
    (out / "..corgi-partial.tmp-4242").mkdir(parents=True)
    (out / "..corgi-partial.tmp-4242" / "plan.json").write_bytes(plan_of(reference))


def partial_with_temporaries(out, reference):
    partial = out / ".corgi-partial"
    partial.mkdir(parents=True)
    (partial / "plan.json").write_bytes(plan_of(reference))
    (partial / "block-3.spill").write_bytes(b"x" * 100)
    (partial / ".shard-000000.tar.json.tmp-4242").write_bytes(b"{")
    (out / ".shard-000000.tar.tmp-4242").write_bytes(b"\0" * 1000)
    (out / ".manifest.json.tmp-4242").write_bytes(b"{")


def finished_with_stale_partial(out, reference):
    shutil.copytree(reference, out)
    (out / ".corgi-partial").mkdir()
    (out / ".corgi-partial" / "plan.json").write_bytes(plan_of(reference))
    (out / ".corgi-partial" / "shard-000000.tar.json").write_bytes(b"{}")


def finished_with_planless_partial(out, reference):
    shutil.copytree(reference, out)
    (out / ".corgi-partial").mkdir()
    (out / ".corgi-partial" / "shard-000001.tar.json").write_bytes(b"{}")
    (out / ".manifest.json.tmp-4242").write_bytes(b"{")


@pytest.mark.parametrize("build", [old_empty_partial, old_temporary_plan_only, staging_partial,
                                   partial_with_temporaries, finished_with_stale_partial,
                                   finished_with_planless_partial])
def test_rerun_completes_from_state(corpus, corgi, tmp_path, build):
    out = tmp_path / "out"
    build(out, corpus.reference)
    rerun(corgi, corpus.root, out)
    assert_complete(corgi, out, corpus)


@pytest.mark.parametrize("extra", ["notes.txt", ".corgi-partial/notes.txt"])
def test_foreign_output_is_still_refused(corpus, corgi, tmp_path, extra):
    """Leftovers are recognised by name and place; anything else in OUTPUT is not ours to delete."""
    out = tmp_path / "out"
    (out / extra).parent.mkdir(parents=True, exist_ok=True)
    (out / extra).write_text("mine")
    result = corgi("pack", corpus.root, out, *OPTIONS)
    assert result.exit_code == 1 and "not empty and holds no corgi pack" in result.stderr
    assert (out / extra).read_text() == "mine"


# --- worker processes ----------------------------------------------------------------------------



@pytest.mark.skipif(sys.platform != "linux", reason="workers die with their parent on Linux (prctl)")
def test_workers_die_with_the_pack(corpus, slow_size_fn, tmp_path):
    _, env = slow_size_fn
    cmd = pack_command(corpus.root, tmp_path / "out", 2, "--size-fn", "corgi_test_crash_sizes:tokens")
    proc = subprocess.Popen(cmd, env=dict(env, CORGI_TEST_SLEEP="0.5"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(workers := children(proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "the pack started no workers"
            time.sleep(0.01)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [w for w in workers if alive(w)], "workers outlived the killed pack"
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="workers die with their parent on Linux (prctl)")
@pytest.mark.parametrize("orphaned", [False, True])
def test_worker_initializer_exits_when_already_orphaned(orphaned):
    """A parent that died before prctl took effect: the worker sees another parent pid and exits."""
    from corgi_io.processes import die_with_parent

    parent = os.getpid() + (12345 if orphaned else 0)
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent(parent)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == (1 if orphaned else 0)


# --- a full disk and other write errors ---------------------------------------------------------

DISK_OPTIONS = (*OPTIONS, "--order", "keep")


@pytest.fixture(scope="module")
def disk_corpus(tmp_path_factory, corgi) -> Case:
    """40 small files, then (in --order keep) one of 64 KiB that gets a shard of its own."""
    base = tmp_path_factory.mktemp("disk")
    samples = make_corpus(base / "corpus", 40)
    big = base / "corpus" / "c9" / "zz_big.txt"
    big.parent.mkdir()
    big.write_bytes(b"corgi " * ((64 << 10) // 6))
    samples["c9/zz_big"] = big.read_bytes()
    return Case(base / "corpus", samples, reference_pack(corgi, base / "corpus", base / "reference", *DISK_OPTIONS))


def file_size_limit(limit: int):
    """preexec_fn: no file may grow past `limit` bytes; a write past it fails with EFBIG, as on a full disk."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def finished_shards(out: Path) -> dict:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("shard-*")}


def pack_fails_then_resumes(corgi, case: Case, out: Path, options, failed, message: str) -> dict:
    """`failed`, the pack that hit a write error, printed one line containing `message` and exited 1; the
    same command then completes and keeps the shards finished before the error.  Returns those shards."""
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 1 and len(lines) == 1, failed.stderr
    assert message in lines[0], lines[0]
    kept = finished_shards(out)
    rerun(corgi, case.root, out, 1, options)
    assert {name: finished_shards(out)[name] for name in kept} == kept, "finished shards were rewritten"
    assert_complete(corgi, out, case)
    return kept


@pytest.mark.parametrize("workers, written", [(1, "shard-000007.tar"), (2, "shard-000007.tar")])
def test_shard_write_error_is_one_line_and_rerun_resumes(disk_corpus, corgi, tmp_path, workers, written):
    """The big file's shard grows past RLIMIT_FSIZE (written by this process, or by a worker process)."""
    sizes = sorted(p.stat().st_size for p in disk_corpus.reference.glob("shard-*"))
    out = tmp_path / "out"
    failed = subprocess.run(pack_command(disk_corpus.root, out, workers, "--order", "keep"), capture_output=True,
                            text=True, timeout=60, preexec_fn=file_size_limit(sizes[-2] + 4096))
    kept = pack_fails_then_resumes(corgi, disk_corpus, out, DISK_OPTIONS, failed, f"{out}/{written}: File too large")
    assert len(kept) == len(sizes) - 1


def test_manifest_write_error_is_one_line_and_rerun_resumes(corgi, tmp_path):
    """Shards of one or two samples fit under RLIMIT_FSIZE; a manifest file does not."""
    from corgi_io.manifest import HEAD_NAME, column_path, column_schema
    from corgi_io.manifest.schema import BLOCKS_PATH, ROWS_PATH, SKIPS_PATH

    options = (*OPTIONS[:-1], "3k")
    root = tmp_path / "corpus"
    samples = make_corpus(root, 120)  # 120 one-sample shards: the head, listing them, outgrows any shard
    case = Case(root, samples, reference_pack(corgi, root, tmp_path / "reference", *options))
    shards = [p.stat().st_size for p in case.reference.glob("shard-*")]
    written = [column_path(name) for name in column_schema()] + [ROWS_PATH, BLOCKS_PATH, SKIPS_PATH, HEAD_NAME]  # the
    # order save_manifest writes them
    biggest = max((case.reference / name).stat().st_size for name in written)
    assert max(shards) < biggest, "the corpus no longer makes a manifest file the largest file"
    limit = (max(shards) + biggest) // 2
    first_too_big = next(name for name in written if (case.reference / name).stat().st_size > limit)
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", CLI, "pack", str(case.root), str(out), *options, "--workers", "1"]
    failed = subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=file_size_limit(limit))
    kept = pack_fails_then_resumes(corgi, case, out, options, failed, f"{out}/{first_too_big}: File too large")
    assert len(kept) == len(shards)


def test_full_disk_is_one_line_and_rerun_resumes(disk_corpus, corgi, tmp_path):
    """A real ENOSPC on a 64 KiB tmpfs; the rerun, once the tmpfs has grown, resumes."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command: apt-get install -y mount")
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        out = mount / "out"
        failed = subprocess.run(pack_command(disk_corpus.root, out, 1, "--order", "keep"), capture_output=True,
                                text=True, timeout=60)
        subprocess.run(["mount", "-o", "remount,size=4m", str(mount)], check=True)
        kept = pack_fails_then_resumes(corgi, disk_corpus, out, DISK_OPTIONS, failed, "No space left on device")
        assert kept, "no shard fitted before the disk was full"
        assert f"{out}/shard-{len(kept):06d}.tar: No space left on device" in failed.stderr
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)

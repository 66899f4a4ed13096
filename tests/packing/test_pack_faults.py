"""Every failure during a pack is one line, whatever the moment, and a rerun then completes the same pack.

The `os` calls that write (open, write, writev, fsync, fdatasync, rename, replace) are replaced
in this process by ones that fail the k-th call with ENOSPC or EIO, for every k until a pack
makes fewer calls than k.  Each run must end in a PackError whose message is one line naming a
file; the same pack without the fault must then complete and leave OUTPUT byte for byte as an
uninterrupted pack does.  A real full disk (a small tmpfs, where this sandbox may mount one)
checks the same at every size between a nearly empty disk and one that fits the pack.
"""
from __future__ import annotations

import errno
import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from corgi_io import PackError, open_manifest, verify
from corgi_io.packing import PackOptions, pack
from helpers.corpus_factory import write_text
from helpers.packs import all_files

FAULTY = ("open", "write", "writev", "fsync", "fdatasync", "rename", "replace")
SYNCS = ("fsync", "fdatasync")
PATH_ARGUMENTS = {"open": 1, "rename": 2, "replace": 2}  # calls whose error names their paths, as the real ones do
OPTIONS = {"wds": PackOptions(format="wds", block_samples=2, shard_bytes=6 << 10),
           "tfrecord": PackOptions(format="tfrecord", block_samples=2, shard_bytes=6 << 10)}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """8 small text files in 2 classes: 4 blocks in 3 shards."""
    root = tmp_path_factory.mktemp("faults") / "corpus"
    for i in range(8):
        write_text(root / f"c{i % 2}/doc_{i:02d}.txt", 40 + 13 * i, seed=i)
    return root




def failing_os(patch: pytest.MonkeyPatch, fail_at: int, code: int = 0) -> list:
    """Make the `fail_at`-th call of the FAULTY os functions (from any thread) raise OSError(`code`); returns a
    list that gets the counter, then the failed call's name.  fsync and fdatasync return without reaching the
    disk (durability is not under test here, and they take most of a small pack's time)."""
    counter = itertools.count(1)
    seen = [counter]

    def faulty(name, real):
        def call(*args, **kwargs):
            if next(counter) != fail_at:
                return None if name in SYNCS else real(*args, **kwargs)
            seen.append(name)
            paths = [os.fspath(arg) for arg in args[:PATH_ARGUMENTS.get(name, 0)]]
            raise OSError(code, os.strerror(code), *paths)
        return call
    for name in FAULTY:
        patch.setattr(os, name, faulty(name, getattr(os, name)))
    return seen


def pack_with_fault(root: Path, out: Path, options: PackOptions, fail_at: int = 0, code: int = 0):
    """(name of the failed call or None, the PackError or None) of one pack whose `fail_at`-th call fails."""
    with pytest.MonkeyPatch.context() as patch:
        seen = failing_os(patch, fail_at, code)
        try:
            pack(root, out, options, workers=1, strict=True, progress=False)
        except PackError as exc:
            return seen[1] if len(seen) > 1 else None, exc
    return seen[1] if len(seen) > 1 else None, None


SLOW = pytest.mark.slow  # about 15 s each: the same code paths as wds/ENOSPC, which runs always


@pytest.mark.parametrize("fmt, code", [("wds", errno.ENOSPC), pytest.param("wds", errno.EIO, marks=SLOW),
                                       pytest.param("tfrecord", errno.ENOSPC, marks=SLOW),
                                       pytest.param("tfrecord", errno.EIO, marks=SLOW)])
def test_a_failed_call_at_any_moment_is_one_line_and_the_rerun_completes(source, tmp_path, monkeypatch, fmt, code):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # identical manifests from every run
    options = OPTIONS[fmt]
    assert pack_with_fault(source, tmp_path / "reference", options) == (None, None)
    expected = all_files(tmp_path / "reference")
    failed = []
    for fail_at in itertools.count(1):
        out = tmp_path / f"at{fail_at}"
        call, error = pack_with_fault(source, out, options, fail_at, code)
        if call is None:
            assert error is None, error
            break  # the pack made fewer calls than fail_at: every call has failed once
        if error is not None:  # a failure that the pack cannot work around (a spool file finds another way)
            message = str(error)
            assert len(message.splitlines()) == 1 and os.strerror(code) in message, (call, message)
            assert str(tmp_path) in message or str(source) in message, f"{call}: names no file: {message}"
            promised = "rerun the same command to resume" in message
            assert not promised or (out / ".corgi-partial").is_dir(), f"{call}: promises a resume: {message}"
            failed.append(call)
            assert pack_with_fault(source, out, options) == (None, None)
        assert all_files(out) == expected, f"the failed {call} (call {fail_at}) left another pack"
    print(f"{fmt}, {errno.errorcode[code]}: {fail_at - 1} calls, {len(failed)} failed the pack; all reruns completed")
    assert {"open", "write", "writev", "fsync", "fdatasync", "replace", "rename"} <= set(failed)


def test_a_failed_finish_closes_the_shard_once(tmp_path):
    """The campaign's EBADF: a shard's sidecar failed after its descriptor was closed, and abort closed it again."""
    from corgi_io.formats import get_format
    from corgi_io.packing.shard_file import ShardFile

    shard = ShardFile(get_format("tfrecord"), tmp_path / "shard-000000.tfrecord")
    shard.write([b"x" * 10], 10)
    (tmp_path / "shard-000000.tfrecord.index").mkdir()  # the sidecar cannot replace a folder
    closed, real_close = [], os.close
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "close", lambda fd: (closed.append(fd), real_close(fd))[1])
        with pytest.raises(IsADirectoryError):
            shard.seal([0], [10])
        shard.abort()
    assert len(closed) == 1, closed
    assert not list(tmp_path.glob(".shard-*")), "the temporary shard stayed"


# --- a misused OUTPUT ----------------------------------------------------------------------------

MISUSES = {  # name -> OUTPUT, given SOURCE
    "an existing file": lambda source: source.parent / "afile",
    "SOURCE itself": lambda source: source,
    "a folder inside SOURCE": lambda source: source / "packed",
    "a new folder deeper inside SOURCE": lambda source: source / "c0" / "new" / "packed",
    "SOURCE through a symlink": lambda source: source.parent / "link",
}


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_a_misused_output_is_one_line_before_anything_is_written(source, corgi, misuse):
    (source.parent / "afile").write_text("mine")
    if not (source.parent / "link").exists():
        (source.parent / "link").symlink_to(source)
    out = MISUSES[misuse](source)
    before = all_files(source.parent)
    result = corgi("pack", source, out, "--workers", "1")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"Error: {out}: "), result.output
    assert "rerun" not in lines[0] and "resume" not in lines[0], lines[0]
    assert all_files(source.parent) == before, "a file was written or changed"
    assert out in (source, source.parent / "link") or not out.is_dir(), "OUTPUT was created"
    assert sorted(p.name for p in source.iterdir()) == ["c0", "c1"], "something was written into SOURCE"


# --- a real full disk ---------------------------------------------------------------------------

@pytest.fixture
def tmpfs(tmp_path):
    """A function mount(size) -> mounted tmpfs folder of that size (remounted if mounted already); skips where this
    sandbox cannot mount one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = []

    def make(size: int) -> Path:
        options = f"{'remount,' if mounted else ''}size={size}"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
        mounted.append(size)
        return mount
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    yield make
    if mounted:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def big_source(tmp_path_factory) -> Path:
    """12 small text files and 3 of 60 to 100 KiB: a full disk can also cut a shard's large writes short."""
    root = tmp_path_factory.mktemp("full-disk") / "corpus"
    for i in range(12):
        write_text(root / f"c{i % 3}/doc_{i:02d}.txt", 40 + 13 * i, seed=i)
    for i in range(3):
        (root / f"c{i}/big_{i}.txt").write_bytes(b"corgi " * (((60 + 20 * i) << 10) // 6))
    return root


@pytest.mark.slow  # mounts file systems
@pytest.mark.parametrize("fmt", sorted(OPTIONS))
def test_a_full_disk_at_any_size_is_one_line(big_source, tmp_path, tmpfs, corgi, monkeypatch, fmt):
    """`corgi pack` onto a tmpfs of every size (in 8 KiB steps) up to one that fits: one line or success, and
    then (the disk grown) the rerun completes the same pack."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    options = ("--format", fmt, "--block-samples", "2", "--shard-bytes", "128k", "--workers", "1", "--strict")
    assert corgi("pack", big_source, tmp_path / "reference", *options).exit_code == 0
    expected = all_files(tmp_path / "reference")
    full = 0
    for size in itertools.count(8 << 10, 8 << 10):
        shutil.rmtree(tmp_path / "disk" / "out", ignore_errors=True)  # emptied first: a tmpfs shrinks only so far
        out = tmpfs(size) / "out"
        result = corgi("pack", big_source, out, *options)
        if result.exit_code == 0:
            break
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and "No space left on device" in lines[0], result.stderr
        full += 1
        tmpfs(size + (1 << 20))
        assert corgi("pack", big_source, out, *options).exit_code == 0
        assert all_files(out) == expected, f"tmpfs of {size} bytes"
    assert all_files(out) == expected and verify(open_manifest(out)).ok
    print(f"{fmt}: {full} sizes filled up; the pack fitted in {size} bytes")
    assert full >= 20

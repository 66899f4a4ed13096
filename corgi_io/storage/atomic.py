"""Atomic local writes for pack output: a temporary name beside the target, fsync, then rename.

Readers (and a rerun after a crash) see either the old file or the whole new one, never a
part.  `temp_name` is the one rule for temporary names, so that a rerun can find and remove
what a killed writer left behind.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket

from corgi_io.errors import ArgumentError

_HOST = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"  # safe in any file name


def temp_name(name: str, writer: int | str | None = None) -> str:
    """The hidden name `.<name>.tmp-<writer>` under which `name` is written before it is renamed into place.

    The writer (``<host>-<pid>`` of this process by default) keeps concurrent writers apart, also
    the workers of a cluster that share OUTPUT, where two hosts can run the same pid;
    ``temp_name("*", "*")`` is the glob that finds the leftovers of any writer that was killed
    before its rename.
    """
    return f".{name}.tmp-{writer_id() if writer is None else writer}"


def writer_id() -> str:
    """``<host>-<pid>``: this process among all that may write to one shared file system."""
    return f"{_HOST}-{os.getpid()}"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "wb", durable: bool = True):
    """Write a local file so readers see the old file or the whole new one, never a part.

    Writes `temp_name(name)` beside it, fsyncs, os.replace()s, fsyncs the
    directory; without `durable` (a cache, whose files are checked when read back) nothing is fsync'd. On an exception before the rename the temp file is removed and `path` is untouched;
    an OSError that names no file (a failed write or fsync, also the directory's: a full disk) is given `path`.
    """
    if mode not in ("wb", "w"):
        raise ArgumentError(f"atomic_output mode must be 'wb' or 'w', not {mode!r}")
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    tmp = os.path.join(directory, temp_name(name))
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            _sync_directory(directory)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = os.fspath(path)
        raise


def _sync_directory(directory: str) -> None:
    """fsync a directory, which makes a rename in it durable."""
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_atomic(path: str | os.PathLike, data: bytes, durable: bool = True) -> None:
    """Atomically replace `path` with `data` (see atomic_output)."""
    with atomic_output(path, "wb", durable) as f:
        f.write(data)

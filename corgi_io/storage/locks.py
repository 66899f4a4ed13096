"""One writer per folder: the lock file ``.corgi-lock`` that `corgi pack` holds in OUTPUT for its whole run.

Two packs writing one OUTPUT delete each other's files, so the second must stop before it touches
anything.  A run makes its lock file whole under a temporary name (details: host, pid, start time;
an ``flock`` taken; fsync'd) and then links it to ``.corgi-lock``.  link(2) fails when the name
exists and is atomic on local disks, NFS and Lustre alike, so of two runs exactly one gets the
lock, and no lock file is ever seen, nor left by a kill, without its details and its flock.  (On a
file system without hard links the file is created in place with O_EXCL: a run killed within the
few instructions before its details are written leaves a lock naming no holder, to delete by hand.)
The holder removes the file when its run ends, however it ends, short of a kill.  Its worker
processes share the flock, so the lock lasts until the last of them ends.

A run killed with SIGKILL (or a crashed host) leaves the file behind.  A run on the same host tells
that its holder is gone: its flock is free (the kernel drops it with the last process of that run),
or, where the file system has no flock, its pid no longer runs.  It then warns, removes the stale
file (holding its flock, so that two runs cleaning up cannot both win) and takes the lock.  A holder
on another host cannot be checked from here (Lustre's and NFS's flock may be local to each node), so
the run refuses and says how to clear the lock by hand.  Without flock, a reused pid keeps a stale
lock, and a pid in another pid namespace with the same host name is taken for gone.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import socket
import time
from pathlib import Path

from corgi_io.storage.atomic import temp_name, writer_id
from corgi_io.errors import PackError

LOCK_NAME = ".corgi-lock"
ATTEMPTS = 5          # tries at taking the lock while others create or remove lock files
SETTLE_SECONDS = 0.1  # how long a holder may take to write its details or to remove a stale lock
MAX_DETAILS = 4096    # bytes of a lock file read
WORKERS_EXIT_SECONDS = 2.0  # how long the worker processes of a killed holder may take to die with it
_NO_LINK = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS}  # link(2) on a file system without hard links
_NO_FLOCK = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}  # EBADF: NFS, read-only
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_HOST_NAME = re.compile(r"[!-~]{1,255}")  # printable ASCII, no spaces: a host name fit for a one-line message


class HeldLock:
    """A lock held from `acquire` to `release`, as a context manager: a folder's (`FolderLock`) or an object
    store's (`object_lock.ObjectLock`)."""

    def acquire(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class FolderLock(HeldLock):
    """The lock of one folder, held from `acquire` to `release`; a context manager."""

    def __init__(self, folder, warn):
        self.path, self.warn, self.fd = Path(folder) / LOCK_NAME, warn, None

    def acquire(self) -> None:
        """Take the lock; PackError at once (one line naming the holder) when a live run holds it.

        A stale lock file (its holder killed on this host) is removed with a warning through `warn`.
        Any other failure (a full disk, no permission) is a one-line PackError naming the lock file.
        """
        try:
            for _ in range(ATTEMPTS):
                self.fd = _create(self.path)
                if self.fd is not None:
                    return
                _clear_if_stale(self.path, self.warn)
        except OSError as exc:
            raise PackError(f"{self.path}: cannot take the lock: {exc.strerror or exc}") from exc
        raise PackError(f"{self.path}: still held after {ATTEMPTS} tries; if no corgi pack writes "
                        f"{self.path.parent}, delete {self.path}")

    def release(self) -> None:
        """Remove the lock file, if it is still ours, and drop the flock; a failure is only warned about (the next
        run on this host finds the file stale)."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            if _names(self.path, fd):
                os.unlink(self.path)
        except OSError as exc:
            self.warn(f"{self.path}: could not remove the lock: {exc.strerror or exc}")
        finally:
            os.close(fd)


def _create(path: Path):
    """A descriptor of the new lock file `path`, flocked and holding our details; None when `path` exists (or our
    temporary file was removed as a killed run's leftover: try again).

    The file is made whole under a temporary name, then linked to `path` (link fails if `path` exists), so that
    no kill leaves a lock file that names no holder.  Where the file system has no hard links, `path` is
    created with O_EXCL and written in place.
    """
    temp = path.with_name(temp_name(path.name, f"{writer_id()}-{secrets.token_hex(4)}"))
    fd = _new_lock_file(temp)
    try:
        os.link(temp, path)
        return fd
    except (FileExistsError, FileNotFoundError):
        os.close(fd)
        return None
    except OSError as exc:
        os.close(fd)
        if exc.errno not in _NO_LINK:
            raise
        return _new_lock_file(path)
    finally:
        with contextlib.suppress(OSError):  # a temporary file left here is a leftover that the next pack removes
            os.unlink(temp)


def _new_lock_file(path: Path):
    """Create `path` (O_EXCL), take its flock, write and fsync our details: its descriptor, or None if it exists."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    try:
        _try_flock(fd)  # a new file: nobody else can hold it
        details = json.dumps(holder_details()).encode()
        while details:
            details = details[os.write(fd, details):]
        os.fsync(fd)
        return fd
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def holder_details() -> dict:
    """This run's details, as a lock holds them: {"host", "pid", "started"}."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime(_TIME_FORMAT, time.gmtime())}


def _clear_if_stale(path: Path, warn) -> None:
    """Return when the lock file `path` is gone or was stale and is now removed; PackError when a run holds it."""
    try:
        fd = _open_existing(path)
    except FileNotFoundError:
        return
    try:
        holder = _details(fd)
        if holder is None:
            time.sleep(SETTLE_SECONDS)  # its holder may be writing them
            holder = _details(fd)
        if holder is None:
            if _names(path, fd):
                raise PackError(f"{path.parent}: another corgi pack holds it (its lock names no holder); "
                                f"if none is running, delete {path}")
            return
        if _holder_lives(fd, holder):
            time.sleep(SETTLE_SECONDS)  # a run removing this stale lock holds its flock for a moment
            if _names(path, fd):
                raise PackError(_held_message(path, holder))
            return
        if _names(path, fd):
            os.unlink(path)
            warn(f"{path}: removed the lock of a run that is gone ({describe_holder(holder)})")
    finally:
        os.close(fd)


def _open_existing(path: Path) -> int:
    """`path` opened for writing if we may (NFS grants an exclusive flock only then), else for reading."""
    try:
        return os.open(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def _details(fd: int):
    """{"host", "pid", "started"} as the holder wrote them, or None when they are missing or malformed."""
    return parse_details(os.pread(fd, MAX_DETAILS, 0))


def parse_details(data: bytes):
    """The holder's details {"host", "pid", "started", ...} in a lock's bytes, or None when they are malformed."""
    try:
        holder = json.loads(data)
        host, pid, started = holder["host"], holder["pid"], holder["started"]
        valid = (isinstance(host, str) and _HOST_NAME.fullmatch(host) and type(pid) is int and pid > 0
                 and isinstance(started, str) and time.strptime(started, _TIME_FORMAT))
    except (ValueError, TypeError, KeyError):
        return None
    return holder if valid else None


def _holder_lives(fd: int, holder: dict) -> bool:
    """Whether the run in `holder` may still run: always for another host; on this one, its flock is held (or,
    without flock, its pid runs).  Taking the flock here keeps it until `fd` is closed."""
    if holder["host"] != socket.gethostname():
        return True
    if holder["pid"] == os.getpid():
        return True  # this process holds it (no flock test: NFS emulates flock with per-process locks)
    held, runs = _try_flock(fd), process_runs(holder["pid"])
    deadline = time.monotonic() + WORKERS_EXIT_SECONDS
    while held and not runs and time.monotonic() < deadline:  # its worker processes, dying with it, hold the flock
        time.sleep(0.02)
        held = _try_flock(fd)
    return runs if held is None else held


def process_runs(pid: int) -> bool:
    """Whether a process `pid` runs on this host (maybe another than the holder, that reused its pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    return True


def _try_flock(fd: int):
    """Take the flock of `fd` without waiting: False when taken, True when another holds it, None without flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return None
        raise


def _names(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (not removed, nor replaced by another run's lock)."""
    try:
        found, have = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (found.st_dev, found.st_ino) == (have.st_dev, have.st_ino)


def describe_holder(holder: dict) -> str:
    """The holder in words, for messages."""
    return f"host {holder['host']}, pid {holder['pid']}, started {holder['started']}"


def _held_message(path: Path, holder: dict) -> str:
    """One line: who holds the lock, and for a holder on another host how to clear a lock whose run is gone."""
    message = f"{path.parent}: another corgi pack is writing it ({describe_holder(holder)})"
    if holder["host"] != socket.gethostname():
        return f"{message}; if that run is gone, delete {path}"
    return f"{message}; wait for it to finish, or pack into another OUTPUT"

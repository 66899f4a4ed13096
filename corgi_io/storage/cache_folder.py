"""A folder of cached pieces on local disk, which the processes of one node share.

Each piece is one file named by its key, written whole under a temporary name and renamed into
place (`write_atomic`, without fsync: a cached file is checked when it is read back), so a reader
finds the whole file or none, never a torn one.  Two kinds of lock, each owned by an open file, so
that the kernel drops it when its holder dies (a killed process leaves no stale lock):
`fetching(key)`, one per piece, so that one process fetches a piece while the others wait and then
find its file; and `accounting()`, the folder's (an flock(2) on an empty lock file), held while the
sizes are listed, victims deleted and a new file put in place, so that the limit holds across
processes.  A piece's lock is one byte of the folder's `.lock-pieces` file, at the CRC32 of its key
(an open file description lock, Linux): no file is created per piece, which cost a cold first epoch
about 0.6 ms of system CPU per piece on ext4 (two keys of one CRC32 merely wait for each other).
Elsewhere each piece has an flock on a lock file of its own, `.lock-piece-<key>`.  Names
that start with "." (lock files, temporary files) are not pieces and count for nothing.  A full
disk (`disk_full`: ENOSPC, EDQUOT) is raised as the OSError it is, from whatever creates a file or
the folder, so that the caller can stop caching instead of stopping the reads; a write that
meets it leaves no temporary file behind.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import sys
import zlib
from pathlib import Path

from corgi_io.errors import StorageError
from corgi_io.storage.atomic import write_atomic

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
PIECE_LOCKS = ".lock-pieces"  # the one file whose bytes lock the pieces (Linux)
FLOCK = "hhqqixxxx"  # struct flock on 64-bit Linux: type, whence, start, len, pid (0 for an OFD lock)
OFD_LOCKS = sys.platform == "linux" and hasattr(fcntl, "F_OFD_SETLKW") and struct.calcsize(FLOCK) == 32


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota on it) has no room left."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


class CacheFolder:
    """The files of one pack's cached pieces under `path` (created if missing; a full disk raises its OSError)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if disk_full(exc):
                raise
            raise StorageError(f"{self.path}: cannot create the cache folder: {exc.strerror or exc}") from exc

    def read(self, key: str) -> bytes | None:
        """The cached piece `key`, or None when it is not cached."""
        try:
            return (self.path / key).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> None:
        """Put piece `key` in place, whole (a temporary name, then a rename)."""
        write_atomic(self.path / key, data, durable=False)

    def remove(self, key: str) -> None:
        """Delete piece `key` (a reader that has it open keeps reading the whole old file)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path / key)

    def sizes(self) -> dict:
        """{key: bytes} of every cached piece."""
        found = {}
        for entry in os.scandir(self.path):
            if not entry.name.startswith("."):
                with contextlib.suppress(FileNotFoundError):  # deleted by another process meanwhile
                    found[entry.name] = entry.stat().st_size
        return found

    def fetching(self, key: str):
        """The lock of piece `key`, held while it is fetched and written (a context manager): on Linux a lock on
        one byte of the folder's one piece-lock file, else an flock on a lock file of its own."""
        if OFD_LOCKS:
            return self._byte_locked(PIECE_LOCKS, zlib.crc32(key.encode()))
        return self._locked(f".lock-piece-{key}")

    def accounting(self):
        """The folder's lock, held while its sizes are listed and changed (a context manager)."""
        return self._locked(".lock-folder")

    @contextlib.contextmanager
    def _byte_locked(self, name: str, offset: int):
        """An exclusive lock on byte `offset` of the lock file `name`, owned by its open file (Linux's F_OFD_SETLKW),
        so threads of one process exclude each other too, and the kernel drops it when its holder dies."""
        fd = os.open(self.path / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0))
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _locked(self, name: str):
        """An exclusive flock on the lock file `name`: per open file, so threads of one process exclude each other too."""
        fd = os.open(self.path / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

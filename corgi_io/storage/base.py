"""The Storage contract: what every backend (local, HTTP, fsspec) offers the manifest, the readers and verify.

Callers use only what `Storage` declares here, never a backend's class: a backend that can hand
out a local file (to memory-map it) says so through `local_path`; the readers size their reads in
flight from `reads_in_flight`.  Every method that touches a file raises `StorageError` naming the
file (and the offset, for reads) when the storage fails, and FileNotFoundError (or another OSError
with its errno) when the file itself is missing or unreadable, so that callers can tell the two.
"""
from __future__ import annotations

import abc
import contextlib
import errno
import os
import threading
import time

from corgi_io.errors import ArgumentError

RANGES_AT_ONCE = 8  # ranged reads `read_ranges` keeps in flight where one request cannot carry several ranges
_WAITED = threading.local()  # per thread: seconds inside storage requests, of them before first bytes, nesting depth


def waited_seconds() -> float:
    """This thread's seconds spent so far waiting on remote storage, in any Storage (every attempt of a retried
    request, its back-off included, and the wait for `read_ranges`' threads).  The loader times what a thread
    waited on storage outside its reads (a remote manifest's rows, fetched while planning) as the difference."""
    return getattr(_WAITED, "seconds", 0.0)


def first_byte_seconds() -> float:
    """This thread's seconds spent so far waiting for first bytes, where a backend tells them apart from the
    transfer (HTTP: until an answer's headers came, `waited_for_first_byte`); a reader times one read's wait as
    the difference around it (`PieceReader`, stage ``first_byte``)."""
    return getattr(_WAITED, "first_byte", 0.0)


def waited_for_first_byte(seconds: float) -> None:
    """A backend's request on this thread waited `seconds` for its answer's first byte."""
    _WAITED.first_byte = first_byte_seconds() + seconds


@contextlib.contextmanager
def waiting():
    """Count the time inside as this thread's wait on storage (`waited_seconds`); nested uses count once."""
    depth = getattr(_WAITED, "depth", 0)
    _WAITED.depth, start = depth + 1, time.perf_counter()
    try:
        yield
    finally:
        _WAITED.depth = depth
        if depth == 0:
            _WAITED.seconds = waited_seconds() + time.perf_counter() - start


class Storage(abc.ABC):
    """A pack's root, read with ranged reads; counters of the reads; the pid owning cached handles
    (a new process, a forked DataLoader worker or an unpickled copy, rebuilds its handles on first use)."""

    reads_in_flight: tuple = (1, 1)  # (first, most) ranged reads a reader keeps in flight on this storage
    ranges_per_request: int = 1      # byte ranges one request can carry (`read_ranges`); HTTP: multi-range
    sizes_from_reads = False  # True where a ranged read's answer tells the file's size (`known_size`)

    def __init__(self, root: str):
        self.root = root.rstrip("/") or "/"
        self.reads = self.bytes_read = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()  # the loader reads from several threads at once

    def url(self, relpath: str) -> str:
        """Full path or URL of `relpath` under the root, as named in errors."""
        return f"{self.root.rstrip('/')}/{relpath.lstrip('/')}"

    def _start_read(self, offset: int, length: int) -> bool:
        """Validate a range and count it; False for an empty read, which touches nothing."""
        if offset < 0 or length < 0:
            raise ArgumentError(f"bad range: offset={offset} length={length}")
        if length:
            with self._lock:
                self.reads += 1
                self.bytes_read += length
        return length > 0

    def _forked(self) -> bool:
        """True, once, when first used in a process other than the last one (call under `_lock`)."""
        pid, self._pid = self._pid, os.getpid()
        return pid != self._pid

    def __getstate__(self):
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state, _lock=threading.Lock())

    @abc.abstractmethod
    def read_range(self, relpath: str, offset: int, length: int) -> bytes:
        """Exactly `length` bytes of `relpath` at `offset`; StorageError naming file and offset otherwise."""

    def read_ranges(self, relpath: str, ranges: list) -> list:
        """The bytes of each (offset, length) of `ranges` in `relpath`, in order.  Here one `read_range` each, up
        to RANGES_AT_ONCE at a time on threads (one round trip for all); a backend that can ask for many ranges in
        one request (HTTP multi-range) does so, which is what keeps a rank's metadata requests few."""
        if len(ranges) <= 1:
            return [self.read_range(relpath, offset, length) for offset, length in ranges]
        from concurrent.futures import ThreadPoolExecutor

        with waiting(), ThreadPoolExecutor(min(RANGES_AT_ONCE, len(ranges)), thread_name_prefix="corgi-ranges") as pool:
            return list(pool.map(lambda where: self.read_range(relpath, *where), ranges))

    @abc.abstractmethod
    def read_all(self, relpath: str) -> bytes:
        """The whole file (a manifest part or an index sidecar); not counted in `reads`."""

    def read_small(self, relpath: str, most: int) -> tuple:
        """(size, bytes) of a whole small file (a manifest's head), the bytes None when it holds more than `most`
        (not read); FileNotFoundError when it is missing.  Its look-up gets the short `open_retry_seconds` budget
        where the storage has one, so that a wrong root fails fast.  Here three calls (exists, size, read_all: the
        caller checks that the bytes did not outgrow `most`); HttpStorage makes them one GET."""
        if not self.exists(relpath):
            raise FileNotFoundError(errno.ENOENT, "not found", self.url(relpath))
        size = self.size(relpath)
        return size, (self.read_all(relpath) if size <= most else None)

    @abc.abstractmethod
    def size(self, relpath: str) -> int:
        """The file's size in bytes."""

    def known_size(self, relpath: str) -> int | None:
        """The file's size as an earlier answer told it (HTTP's Content-Range), without a request; None if unknown.
        Readers check a shard's size from there after its first read instead of asking first (a round trip)."""
        return None

    @abc.abstractmethod
    def exists(self, relpath: str) -> bool:
        """Whether the file exists."""

    def local_path(self, relpath: str) -> str | None:
        """A path on this machine that can be opened and memory-mapped in place of `relpath`, or None
        when the bytes are only reachable through `read_range` (every remote backend)."""
        return None

    def close(self) -> None:
        """Release cached handles; the object stays usable and reopens on demand."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

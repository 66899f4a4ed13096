"""Ranged reads of shard files in place (atomic writes live in corgi_io.atomic).

The loader reads each block with one `read_range`; the manifest holds every
offset and size, so nothing is listed or stat'ed per sample. Local paths (and
Lustre) use os.pread on cached descriptors; other URLs use fsspec range reads
that ride out outages within a time budget (exponential backoff, full jitter).
A read returns exactly the bytes asked for or raises StorageError naming file
and offset. `reads`/`bytes_read` let tests count reads.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
from collections import OrderedDict
from urllib.parse import urlsplit

import aiohttp
import fsspec.core

from corgi_io.errors import StorageError


def open_storage(root: str, **storage_options) -> Storage:
    """LocalStorage for a path or file:// URL, else FsspecStorage (retry settings, fsspec options).

    Local storage ignores the options, so one `storage_options` serves a dataset wherever it lives.
    """
    root = os.fspath(root)
    if "://" not in root:
        return LocalStorage(root)
    parts = urlsplit(root)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"{root}: file:// URL with a remote host is not supported")
        return LocalStorage(parts.path)
    return FsspecStorage(root, **storage_options)


class Storage:
    """Root, counters, and the pid owning cached handles: a new process (a forked
    DataLoader worker, or an unpickled copy) rebuilds its handles on first use."""

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
            raise ValueError(f"bad range: offset={offset} length={length}")
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

    def close(self) -> None:
        """Release cached handles; the object stays usable and reopens on demand."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalStorage(Storage):
    """POSIX files (local disk, NFS, Lustre) read with os.pread on cached descriptors.

    pread takes the offset, so no per-read open, seek or stat. At most `max_open`
    idle descriptors stay open (LRU); one in use by a reading thread is never closed
    under it. Each process opens its own: a forked descriptor shares the kernel
    readahead state, so workers reading different blocks would defeat it.
    """

    concurrent_reads = 2  # a second read in flight helps Lustre RPCs and cold disks; more costs GIL time

    def __init__(self, root: str, *, max_open: int = 64, fadvise: bool = True):
        super().__init__(os.path.abspath(os.path.expanduser(root)))
        self.max_open, self.fadvise = max_open, fadvise
        self._fds: OrderedDict[str, list] = OrderedDict()  # path -> [fd, threads using it]

    @contextlib.contextmanager
    def _fd(self, path: str):
        """A descriptor for `path`, held open while the caller reads."""
        with self._lock:
            if self._forked():
                self._close_idle(0, inherited=True)  # the parent's copies stay open in the parent
            entry = self._fds.get(path)
            if entry is None:
                self._refuse_outside(path)
                fd = os.open(path, os.O_RDONLY)  # non-inheritable across exec (PEP 446)
                if self.fadvise and hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # blocks are long runs
                entry = self._fds[path] = [fd, 0]
            self._fds.move_to_end(path)
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1] -= 1
                self._close_idle(self.max_open)

    def _refuse_outside(self, path: str) -> None:
        """StorageError for a path whose real location (symlinks resolved) is not inside the real root.

        Manifests name only relative paths, but a symlink inside a pack could still point
        anywhere; one realpath per file opened keeps every read inside the pack.
        """
        root = os.path.realpath(self.root)
        if not os.path.realpath(path).startswith(root.rstrip("/") + "/"):
            raise StorageError(f"{path}: resolves to {os.path.realpath(path)}, outside the pack root {root}")

    def _close_idle(self, keep: int, inherited: bool = False) -> None:
        """Close least-recently-used descriptors no thread is using until at most `keep` remain."""
        for path in list(self._fds):
            if len(self._fds) <= keep:
                return
            if inherited or self._fds[path][1] == 0:
                os.close(self._fds.pop(path)[0])

    def read_range(self, relpath: str, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset`; StorageError on a short read or I/O error."""
        path = self.url(relpath)
        with self._fd(path) as fd:
            return self._pread(path, fd, offset, length)

    def _pread(self, path: str, fd: int, offset: int, length: int) -> bytes:
        if not self._start_read(offset, length):
            return b""
        chunks, got = [], 0
        while got < length:
            try:
                chunk = os.pread(fd, length - got, offset + got)
            except OSError as e:
                raise StorageError(f"{path}: read failed at offset {offset + got}: {e.strerror}") from e
            if not chunk:  # name the true size: the read may have started past the end of the file
                raise StorageError(f"{path}: short read at offset {offset}: "
                                   f"file ends at {os.fstat(fd).st_size}, wanted {length} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_all(self, relpath: str) -> bytes:
        """The whole file (manifest, index sidecars); not counted in `reads`."""
        self._refuse_outside(self.url(relpath))
        with open(self.url(relpath), "rb") as f:
            return f.read()

    def size(self, relpath: str) -> int:
        return os.stat(self.url(relpath)).st_size

    def exists(self, relpath: str) -> bool:
        return os.path.exists(self.url(relpath))

    def close(self) -> None:
        with self._lock:
            self._close_idle(0)

    def __getstate__(self):
        return {**super().__getstate__(), "_fds": OrderedDict()}


MISSING, TRANSIENT, FATAL = "missing", "transient", "fatal"
_NETWORK_ERRORS = (OSError, asyncio.TimeoutError, aiohttp.ClientError)


def underlying_error(exc: BaseException) -> BaseException:
    """The network error behind a FileNotFoundError raised from it, else `exc`.

    fsspec's HTTP `info()` turns every failure, a refused connection included,
    into FileNotFoundError; its cause tells what really happened.
    """
    if isinstance(exc, FileNotFoundError) and isinstance(exc.__cause__, _NETWORK_ERRORS):
        return exc.__cause__
    return exc


def classify_error(exc: BaseException) -> str:
    """MISSING (the file is not there), TRANSIENT (a retry may help) or FATAL (it will not).

    Transient: network trouble (refused, reset, DNS, timeouts) and HTTP 5xx/408/429.
    """
    exc = underlying_error(exc)
    if isinstance(exc, aiohttp.ClientResponseError):
        if exc.status in (404, 410):
            return MISSING
        return TRANSIENT if exc.status >= 500 or exc.status in (408, 429) else FATAL
    if isinstance(exc, FileNotFoundError):
        return MISSING
    if isinstance(exc, (StorageError, PermissionError, IsADirectoryError)):
        return FATAL
    return TRANSIENT if isinstance(exc, _NETWORK_ERRORS) else FATAL


def backoff_delay(attempt: int, backoff: float, max_backoff: float, rand=random.random) -> float:
    """Seconds to sleep after failed attempt number `attempt` (1, 2, ...): "full jitter".

    Uniform in [0, min(max_backoff, backoff * 2**(attempt-1))], the scheme AWS recommends
    ("Exponential Backoff and Jitter") and botocore and tenacity implement: many ranks
    that lost the same server spread their retries instead of returning in lockstep.
    The module's `random` is reseeded in each forked process, so workers differ too.
    """
    return rand() * min(max_backoff, backoff * 2.0 ** min(attempt - 1, 60))


class FsspecStorage(Storage):
    """Any fsspec URL; a block is one ranged `fs.cat_file(path, start, end)`.

    A transient error is retried, sleeping `backoff_delay` between attempts, until
    `retry_seconds` have passed since the first failure; then it becomes a
    StorageError naming URL and offset. `exists`, the call that finds a dataset,
    gets only `open_retry_seconds`, so a wrong URL fails in seconds. A missing file
    (404) or a refused permission fails at once. `retried` counts retries.
    """

    concurrent_reads = 4  # requests in flight hide network latency (bench/load.py --http)

    def __init__(self, root: str, *, retry_seconds: float = 20.0, open_retry_seconds: float = 2.0,
                 backoff: float = 0.1, max_backoff: float = 2.0, **storage_options):
        super().__init__(root)
        if min(retry_seconds, open_retry_seconds, backoff, max_backoff) < 0:
            raise ValueError("retry_seconds, open_retry_seconds, backoff and max_backoff must be >= 0")
        self.retry_seconds, self.open_retry_seconds = float(retry_seconds), float(open_retry_seconds)
        self.backoff, self.max_backoff, self.retried = float(backoff), float(max_backoff), 0
        self.storage_options = storage_options
        self._fs = self._root_path = None
        self._connect()  # a bad URL or a missing driver fails here, not at the first read

    def _connect(self):
        """Build the filesystem on first use and after fork, so no session or loop is shared."""
        with self._lock:
            if self._forked() or self._fs is None:
                self._build_fs()
        return self._fs

    def _build_fs(self) -> None:
        try:
            self._fs, self._root_path = fsspec.core.url_to_fs(self.root, **self.storage_options)
        except ImportError as e:
            if urlsplit(self.root).scheme in ("hdfs", "arrow_hdfs"):
                raise ImportError(f"{self.root}: hdfs:// needs pyarrow and a Hadoop client "
                                  "(libhdfs): pip install 'corgi-io[hdfs]'; see docs/operations.md") from e
            raise

    def _call(self, what: str, relpath: str, offset: int | None, method: str, *args,
              budget: float | None = None, **kwargs):
        """fs.<method>(path, ...), retried within `budget` s (default `retry_seconds`).

        A missing file or PermissionError is re-raised as is; anything else that ends
        the attempts becomes a one-line StorageError with the cause attached.
        """
        budget = self.retry_seconds if budget is None else budget
        self._connect()
        path = f"{self._root_path.rstrip('/')}/{relpath.lstrip('/')}"
        attempt, first_failure = 0, None
        while True:
            attempt += 1
            try:
                return getattr(self._connect(), method)(path, *args, **kwargs)
            except Exception as e:
                kind, now = classify_error(e), time.monotonic()
                if kind == MISSING or isinstance(e, PermissionError):
                    raise
                first_failure = now if first_failure is None else first_failure
                waited = now - first_failure
                if kind == FATAL or waited >= budget:
                    cause = underlying_error(e)
                    raise self._gave_up(what, relpath, offset, attempt, waited, cause) from cause
            with self._lock:
                self.retried += 1
            time.sleep(min(backoff_delay(attempt, self.backoff, self.max_backoff), budget - waited))

    def _gave_up(self, what: str, relpath: str, offset: int | None, attempts: int, waited: float,
                 exc: Exception) -> StorageError:
        where = self.url(relpath) + ("" if offset is None else f" at offset {offset}")
        tries = f" after {attempts} attempts in {waited:.1f} s" if attempts > 1 else ""
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__  # timeouts have no text
        return StorageError(f"{where}: {what} failed{tries}: {detail}")

    def read_range(self, relpath: str, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset` in one range request; StorageError otherwise."""
        if not self._start_read(offset, length):
            return b""
        data = self._call("read", relpath, offset, "cat_file", start=offset, end=offset + length)
        if len(data) != length:  # a short file, or a server that ignored the Range header
            kind = "short read" if len(data) < length else "range ignored"
            raise StorageError(f"{self.url(relpath)}: {kind} at offset {offset}: got {len(data)} of {length} bytes")
        return data

    def read_all(self, relpath: str) -> bytes:
        """The whole file (manifest, index sidecars); not counted in `reads`."""
        return self._call("read", relpath, None, "cat_file")

    def size(self, relpath: str) -> int:
        return self._call("size", relpath, None, "size")

    def exists(self, relpath: str) -> bool:
        """True if the file is there, False if the server says it is not (404).

        Raises StorageError when the server could not be asked (refused, DNS, 5xx,
        403): fsspec's own `exists()` would turn all of those into False, so a
        dataset whose server is down would read as "no manifest here".
        """
        try:
            self._call("lookup", relpath, None, "info", budget=self.open_retry_seconds)
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        self._fs = None

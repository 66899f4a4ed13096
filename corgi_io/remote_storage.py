"""Remote packs (http, hdfs, s3, ...) read through fsspec, riding out outages within a time budget.

Each ranged read is one `fs.cat_file(path, start, end)`.  Transient failures (network errors,
timeouts, HTTP 5xx/408/429) are retried with exponential backoff and full jitter until the
budget (`retry_seconds`) runs out; a missing file or a refusal fails at once.  Imported only
when a remote root is opened, so local packs never load aiohttp or fsspec.
"""
from __future__ import annotations

import asyncio
import random
import time
from urllib.parse import urlsplit

import aiohttp
import fsspec.core

from corgi_io.errors import StorageError
from corgi_io.storage import Storage


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

    reads_in_flight = (1, 8)  # (first, most): grown while it pays (corgi_io/reading/in_flight.py, docs/operations.md)

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

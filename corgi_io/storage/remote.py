"""Remote packs (http, hdfs, s3, ...) read through fsspec, riding out outages within a time budget.

Each ranged read is one `fs.cat_file(path, start, end)`, retried as corgi_io.storage.retry
says (the same policy as HttpStorage, the default for http(s) URLs).  Imported only
when a remote root is opened, so local packs never load aiohttp or fsspec.
"""
from __future__ import annotations

import asyncio

import aiohttp
import fsspec.core

from corgi_io.errors import StorageError
from corgi_io.storage.hdfs import hdfs_filesystem, is_hdfs
from corgi_io.storage.retry import FATAL, MISSING, TRANSIENT, RetryingStorage, parse_retry_after, status_kind
from corgi_io.storage.s3 import endpoint_hint, is_connection_error, is_s3, s3_options

__all__ = ["FsspecStorage", "classify_error", "underlying_error"]
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

    Transient: network trouble (refused, reset, DNS, timeouts; botocore's too) and HTTP 5xx/408/429.
    """
    exc = underlying_error(exc)
    if is_connection_error(exc):
        return TRANSIENT
    if isinstance(exc, aiohttp.ClientResponseError):
        return status_kind(exc.status)
    if isinstance(exc, FileNotFoundError):
        return MISSING
    if isinstance(exc, (StorageError, PermissionError, IsADirectoryError)):
        return FATAL
    return TRANSIENT if isinstance(exc, _NETWORK_ERRORS) else FATAL


def _answer_headers(error: BaseException | None):
    """The HTTP headers of the answer behind `error` (aiohttp's ClientResponseError, botocore's ClientError)."""
    headers, response = getattr(error, "headers", None), getattr(error, "response", None)
    if headers is None and isinstance(response, dict):
        headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders")
    return headers if hasattr(headers, "get") else None


class FsspecStorage(RetryingStorage):
    """Any fsspec URL; a block is one ranged `fs.cat_file(path, start, end)`.

    A transient error is retried, sleeping `backoff_delay` between attempts, until
    `retry_seconds` have passed since the first failure; then it becomes a
    StorageError naming URL and offset. `exists`, the call that finds a dataset,
    gets only `open_retry_seconds`, so a wrong URL fails in seconds. A missing file
    (404) or a refused permission fails at once. `retried` counts retries.
    """

    def __init__(self, root: str, *, retry_seconds: float = 20.0, open_retry_seconds: float = 2.0,
                 backoff: float = 0.1, max_backoff: float = 2.0, max_requests: int = 16, **storage_options):
        super().__init__(root, retry_seconds=retry_seconds, open_retry_seconds=open_retry_seconds,
                         backoff=backoff, max_backoff=max_backoff, max_requests=max_requests)
        self.storage_options = storage_options
        self._fs = self._root_path = None
        self._connect()  # a bad URL or a missing driver fails here, not at the first read

    classify = staticmethod(classify_error)
    underlying = staticmethod(underlying_error)

    def retry_after(self, exc: BaseException) -> float | None:
        """The `Retry-After` of an HTTP answer (aiohttp's error, or botocore's behind an s3fs OSError)."""
        for error in (underlying_error(exc), exc.__cause__):
            headers = _answer_headers(error)
            if headers is not None:
                return parse_retry_after(headers.get("Retry-After") or headers.get("retry-after"))
        return None

    def hint(self, exc: BaseException) -> str:
        """How to set an S3 endpoint, when a connection to AWS failed and none was set."""
        return endpoint_hint(self._fs, exc) if is_s3(self.root) else ""

    def _connect(self):
        """Build the filesystem on first use and after fork, so no session or loop is shared."""
        with self._lock:
            if self._forked() or self._fs is None:
                self._build_fs()
        return self._fs

    def _build_fs(self) -> None:
        """A filesystem of this storage's own: fsspec's instance cache is skipped, since it keys on the options
        alone and would hand back a client made before the environment changed (AWS_ENDPOINT_URL, ...).
        hdfs:// goes to the client corgi_io.storage.hdfs picks, not to the one fsspec registered last."""
        if is_hdfs(self.root):
            self._fs, self._root_path = hdfs_filesystem(self.root, self.storage_options)
            return
        options = s3_options(self.storage_options) if is_s3(self.root) else self.storage_options
        self._fs, self._root_path = fsspec.core.url_to_fs(self.root, skip_instance_cache=True, **options)

    def _call(self, what: str, relpath: str, offset: int | None, method: str, *args,
              budget: float | None = None, **kwargs):
        """fs.<method>(path, ...), retried within `budget` s (default `retry_seconds`)."""
        self._connect()
        path = f"{self._root_path.rstrip('/')}/{relpath.lstrip('/')}"
        return self._retry(what, relpath, offset, lambda: getattr(self._connect(), method)(path, *args, **kwargs),
                           budget)

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

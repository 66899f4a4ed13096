"""http(s) packs read with urllib3: one ranged GET per block, checked strictly, retried like FsspecStorage.

Why not fsspec here: its HTTP filesystem runs aiohttp on an event loop thread, and each 4 MB
range arrives as many 64-256 KB chunks handled in Python, about 3 ms of CPU per block; urllib3
reads the body with one blocking `recv_into` loop in http.client (about 1 ms), which also lets
reads in flight overlap outside the GIL. See docs/operations.md ("HTTP").

Nothing the server says is trusted: a range answer must be 206 with the Content-Range asked for
(or 200 for a range that is the whole file) and exactly the bytes asked for, else StorageError
naming URL and offset. Redirects are followed at most MAX_REDIRECTS times.

Nothing is waited on forever either: each request has a `deadline` (answer and body), each socket
operation a `timeout`; a stalled, trickling or cut answer is a transient error, retried (after the
server's `Retry-After`, for a 429 or 503) within the retry budget.
"""
from __future__ import annotations

import errno
import re
import time

import urllib3
from urllib3.exceptions import HTTPError, LocationValueError, MaxRetryError, ResponseError

from corgi_io.arguments import check_number
from corgi_io.errors import StorageError
from corgi_io.storage.base import waited_for_first_byte
from corgi_io.storage.byteranges import MAX_RANGES, body_bound, covers, cut_ranges, parse_parts, range_header
from corgi_io.storage.deadlines import WATCHDOG
from corgi_io.storage.retry import FATAL, MISSING, TRANSIENT, RetryingStorage, parse_retry_after, status_kind

MAX_REDIRECTS = 5
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)$")
_TOTAL = re.compile(r"^bytes (?:\d+-\d+|\*)/(\d+)$")  # the file's size at the end of a Content-Range


class HttpStatusError(Exception):
    """An HTTP answer that is not the one asked for: 4xx/5xx, or a redirect past the limit."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None):
        super().__init__(f"HTTP {status} {reason}".rstrip())
        self.status, self.retry_after = status, retry_after


class DeadlineError(TimeoutError):
    """An answer not complete within the request's deadline (a stalled or trickling body): transient."""


def classify_http_error(exc: BaseException) -> str:
    """MISSING, TRANSIENT (network trouble, timeouts, a cut body, HTTP 5xx/408/429) or FATAL."""
    exc = _unwrap(exc)
    if isinstance(exc, HttpStatusError):
        return status_kind(exc.status)
    if isinstance(exc, FileNotFoundError):
        return MISSING
    if isinstance(exc, (StorageError, PermissionError, ResponseError, LocationValueError)):
        return FATAL  # ResponseError: too many redirects
    return TRANSIENT if isinstance(exc, (OSError, HTTPError)) else FATAL


def _unwrap(exc: BaseException) -> BaseException:
    """The reason inside urllib3's MaxRetryError (raised when its own retries, here none, are spent)."""
    return exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc


def _retry_after(exc: BaseException) -> float | None:
    """The wait a 429/503 answer asked for in its Retry-After header, if any."""
    return getattr(_unwrap(exc), "retry_after", None)


class HttpStorage(RetryingStorage):
    """http(s) URLs over one urllib3 PoolManager per process (rebuilt after fork).

    `headers` are sent with every request (an auth token, say); `timeout` bounds connecting and
    each socket read, `deadline` a whole request (answer and body), in seconds. Retry settings
    and `max_requests` as FsspecStorage (corgi_io.storage.retry).
    """

    reads_in_flight = (3, 8)  # (first, most): reads overlap outside the GIL here; see docs/operations.md
    sizes_from_reads = True   # every range answer's Content-Range ends with the file's size

    def __init__(self, root: str, *, headers: dict | None = None, timeout: float = 30.0, deadline: float = 120.0,
                 **retry_settings):
        super().__init__(root, **retry_settings)
        self.headers, self.timeout = dict(headers or {}), check_number("timeout", timeout, strict=True)
        self.deadline = check_number("deadline", deadline, strict=True)
        self._manager = None
        self._multi_range = True  # until a server answers a multi-range request with the whole file
        self._sizes = {}          # url -> the size its last range answer gave (`known_size`): one int per file read

    @property
    def ranges_per_request(self) -> int:
        """MAX_RANGES a request (multi-range), until a server answers one with the whole file."""
        return MAX_RANGES if self._multi_range else 1

    classify = staticmethod(classify_http_error)
    underlying = staticmethod(_unwrap)
    retry_after = staticmethod(_retry_after)

    def _pool(self) -> urllib3.PoolManager:
        """The process's PoolManager: thread-safe, but its sockets must not cross a fork."""
        with self._lock:
            if self._forked() or self._manager is None:
                self._manager = urllib3.PoolManager(
                    maxsize=16, timeout=urllib3.Timeout(connect=self.timeout, read=self.timeout),
                    retries=urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=MAX_REDIRECTS))
            return self._manager

    def _request(self, method: str, url: str, headers: dict | None = None) -> urllib3.BaseHTTPResponse:
        """One request, its body not yet read, answered within `deadline` (else a transient urllib3 timeout);
        404 -> FileNotFoundError, other errors -> HttpStatusError. `resp.deadline_at` ends the body's time."""
        deadline_at = time.monotonic() + self.deadline
        timeout = urllib3.Timeout(total=self.deadline, connect=self.timeout, read=self.timeout)
        asked = time.perf_counter()
        resp = self._pool().request(method, url, headers={**self.headers, **(headers or {})},
                                    preload_content=False, decode_content=False, timeout=timeout)
        waited_for_first_byte(time.perf_counter() - asked)  # the headers are in, the body is not read yet
        if resp.status < 300:
            resp.deadline_at = deadline_at
            return resp
        resp.close()  # an error body is not read: its size is the server's to choose
        resp.release_conn()
        self._learn_size(url, resp)  # a 416 says how long the file is
        if status_kind(resp.status) == MISSING:
            raise FileNotFoundError(errno.ENOENT, f"not found (HTTP {resp.status})", url)
        raise HttpStatusError(resp.status, resp.reason or "", parse_retry_after(resp.headers.get("Retry-After")))

    def read_range(self, relpath: str, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset` in one range request; StorageError otherwise."""
        if not self._start_read(offset, length):
            return b""
        return self._retry("read", relpath, offset, lambda: self._get_range(self.url(relpath), offset, length))

    def _get_range(self, url: str, offset: int, length: int) -> bytes:
        resp = self._request("GET", url, {"Range": f"bytes={offset}-{offset + length - 1}"})
        self._learn_size(url, resp)  # before the answer is checked: a short one is told apart from a shorter file
        try:
            _check_range_answer(url, resp, offset, length)
            data = self._read_body(resp, length + 1)  # one byte more: a longer body is refused
            return _read_exactly(url, data, offset, length)
        except BaseException:
            resp.close()  # the body was not read to its end: this connection cannot serve another request
            raise
        finally:
            resp.release_conn()

    def read_ranges(self, relpath: str, ranges: list) -> list:
        """The bytes of each (offset, length) of `ranges`, MAX_RANGES to a request (`byteranges`); a server that
        answers a multi-range request with the whole file is asked once per range from then on (`Storage`)."""
        if len(ranges) <= 1 or not self._multi_range:
            return super().read_ranges(relpath, ranges)
        out, url = [], self.url(relpath)
        for at in range(0, len(ranges), MAX_RANGES):
            some = ranges[at:at + MAX_RANGES]
            with self._lock:
                self.reads += 1
                self.bytes_read += sum(length for _, length in some)
            got = self._retry("read", relpath, some[0][0], lambda: self._get_ranges(url, some))
            if got is None:  # the whole file (not read) or one range of several: not asked so again
                self._multi_range = False
                return out + super().read_ranges(relpath, ranges[at:])
            out += got
        return out

    def _get_ranges(self, url: str, ranges: list) -> list | None:
        resp = self._request("GET", url, {"Range": range_header(ranges)})
        try:
            if resp.status != 206:
                resp.close()  # a 200 is the whole file: its body is not read
                return None
            body = self._read_body(resp, body_bound(ranges) + 1)
            if len(body) > body_bound(ranges):
                raise StorageError(f"{url}: a multi-range answer longer than the {body_bound(ranges)} bytes it may take")
            content_type = resp.headers.get("Content-Type", "")
            if content_type.lower().startswith("multipart/"):
                return cut_ranges(url, parse_parts(url, content_type, body), ranges)
            got = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))  # one part: merged ranges, or the first
            part = [(int(got[1]), body)] if got else []
            return cut_ranges(url, part, ranges) if covers(part, ranges) else None  # None: ask range by range
        except BaseException:
            resp.close()
            raise
        finally:
            resp.release_conn()

    def read_all(self, relpath: str) -> bytes:
        """The whole file (manifest, index sidecars); not counted in `reads`."""
        def get():
            resp = self._request("GET", self.url(relpath))
            try:
                return self._read_body(resp, None)  # urllib3 checks the body against Content-Length
            except BaseException:
                resp.close()
                raise
            finally:
                resp.release_conn()
        return self._retry("read", relpath, None, get)

    def read_small(self, relpath: str, most: int) -> tuple:
        """(size, bytes or None past `most`) with one GET within `open_retry_seconds` (a look-up: one round trip
        where `exists`, `size` and `read_all` took three); the body is bounded by Content-Length before it is read,
        and read to at most `most` + 1 bytes when the answer has none."""
        url = self.url(relpath)

        def get():
            resp = self._request("GET", url)
            try:
                declared = resp.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > most:
                    resp.close()  # not read: the caller refuses it
                    return int(declared), None
                data = self._read_body(resp, most + 1)
                return len(data), (data if len(data) <= most else None)
            except BaseException:
                resp.close()
                raise
            finally:
                resp.release_conn()
        return self._retry("lookup", relpath, None, get, budget=self.open_retry_seconds)

    def known_size(self, relpath: str) -> int | None:
        """The size the last range answer for `relpath` gave (the total of its Content-Range), None before one."""
        return self._sizes.get(self.url(relpath))

    def _learn_size(self, url: str, resp) -> None:
        """Keep the file's size a range answer tells: the total of its Content-Range (a 206's or a 416's), or a
        200's Content-Length."""
        total = _TOTAL.search(resp.headers.get("Content-Range", ""))
        length = resp.headers.get("Content-Length", "")
        if total:
            self._sizes[url] = int(total[1])
        elif resp.status == 200 and length.isdigit():
            self._sizes[url] = int(length)

    def size(self, relpath: str) -> int:
        """Content-Length of a HEAD answer."""
        return self._retry("size", relpath, None, lambda: _content_length(self.url(relpath), self._head(relpath)))

    def exists(self, relpath: str) -> bool:
        """True if the file is there, False on 404; StorageError when the server cannot be asked."""
        try:
            self._retry("lookup", relpath, None, lambda: self._head(relpath), budget=self.open_retry_seconds)
        except FileNotFoundError:
            return False
        return True

    def _read_body(self, resp, length: int | None) -> bytes:
        """The body (at most `length` bytes), read before `resp.deadline_at`: the process's watchdog shuts the
        socket down at the deadline, so a stalled or trickling body ends in a transient DeadlineError."""
        sock = getattr(resp.connection, "sock", None)
        token = None if sock is None else WATCHDOG.watch(sock, resp.deadline_at)
        data, error = b"", None
        try:
            data = _read_up_to(resp, length)
        except Exception as exc:
            error = exc
        finally:
            fired = token is not None and not WATCHDOG.cancel(token)
        if fired:
            raise DeadlineError(f"answer not complete within the {self.deadline:g} s deadline") from error
        if error is not None:
            raise error
        return data

    def _head(self, relpath: str):
        resp = self._request("HEAD", self.url(relpath))
        resp.release_conn()
        return resp

    def close(self) -> None:
        with self._lock:
            if self._manager is not None:
                self._manager.clear()
            self._manager = None

    def __getstate__(self):
        return {**super().__getstate__(), "_manager": None}


def _check_range_answer(url: str, resp, offset: int, length: int) -> None:
    """StorageError unless `resp` answers bytes offset..offset+length-1: 206 with that Content-Range,
    or 200 with exactly `length` bytes when the range starts at 0 (the whole file)."""
    where = f"{url} at offset {offset}"
    if resp.status == 200:
        if offset == 0 and _content_length(url, resp) == length:
            return
        raise StorageError(f"{url}: range ignored at offset {offset}: HTTP 200 with "
                           f"{resp.headers.get('Content-Length', 'no')} bytes for a range of {length}")
    if resp.status != 206:
        raise StorageError(f"{where}: unexpected HTTP {resp.status} to a range request")
    got = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
    if not got or (int(got[1]), int(got[2])) != (offset, offset + length - 1):
        if got and int(got[1]) == offset and got[3] != "*" and int(got[3]) == int(got[2]) + 1 < offset + length:
            raise StorageError(f"{url}: short read at offset {offset}: got {int(got[3]) - offset} of {length} bytes")
        raise StorageError(f"{where}: Content-Range {resp.headers.get('Content-Range')!r} "
                           f"does not match bytes {offset}-{offset + length - 1}")


def _read_exactly(url: str, data: bytes, offset: int, length: int) -> bytes:
    """The body, which must be `length` bytes (a cut connection is a transient ProtocolError)."""
    if len(data) != length:
        raise StorageError(f"{url}: short read at offset {offset}: got {len(data)} of {length} bytes")
    return data


def _read_up_to(resp, length: int | None) -> bytes:
    """At most `length` bytes of the body (all of it for None); a body cut short raises urllib3's ProtocolError."""
    data = resp.read(length)
    if length is not None and len(data) < length and resp.length_remaining:
        data += resp.read(length - len(data))  # at the end of what came: urllib3 raises IncompleteRead
    return data


def _content_length(url: str, resp) -> int:
    value = resp.headers.get("Content-Length", "")
    if not value.isdigit():
        raise StorageError(f"{url}: no valid Content-Length in the answer ({value!r})")
    return int(value)

"""The retry policy shared by remote storages (fsspec, urllib3): classify, back off, give up in time.

A transient failure (network errors, timeouts, HTTP 5xx/408/429, S3's 503 SlowDown) is retried
with exponential backoff and full jitter, never sooner than a `Retry-After` the server sent, until
a time budget runs out; a missing file (404) or a refusal (403) fails at once. At most
`max_requests` attempts of one storage run at once in a process. Each backend maps its own
exceptions to MISSING / TRANSIENT / FATAL (`classify`); the loop, the budget and the one-line
StorageError naming URL and offset are the same for all.
"""
from __future__ import annotations

import email.utils
import os
import random
import threading
import time

from corgi_io.arguments import RETRY_SETTINGS, check_number
from corgi_io.errors import ArgumentError, StorageError
from corgi_io.storage.base import Storage, waiting

MISSING, TRANSIENT, FATAL = "missing", "transient", "fatal"


def status_kind(status: int) -> str:
    """How an HTTP error status is treated: 404/410 MISSING, 5xx/408/429 TRANSIENT, the rest FATAL."""
    if status in (404, 410):
        return MISSING
    return TRANSIENT if status >= 500 or status in (408, 429) else FATAL


def backoff_delay(attempt: int, backoff: float, max_backoff: float, rand=random.random) -> float:
    """Seconds to sleep after failed attempt number `attempt` (1, 2, ...): "full jitter".

    Uniform in [0, min(max_backoff, backoff * 2**(attempt-1))], the scheme AWS recommends
    ("Exponential Backoff and Jitter") and botocore and tenacity implement: many ranks
    that lost the same server spread their retries instead of returning in lockstep.
    The module's `random` is reseeded in each forked process, so workers differ too.
    """
    return rand() * min(max_backoff, backoff * 2.0 ** min(attempt - 1, 60))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delay-seconds or an HTTP date), None when absent or unreadable."""
    value = (value or "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def check_max_requests(value) -> int:
    """`max_requests` as an int >= 1 (the requests one storage has in flight at once in a process)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"max_requests must be an integer >= 1, got {value!r}")
    return value


class RetryingStorage(Storage):
    """A Storage whose calls are retried within `retry_seconds` (`open_retry_seconds` for lookups).

    At most `max_requests` attempts run at once in each process (a semaphore per storage, made anew
    after fork or unpickling), so that a node's workers and threads cannot flood a throttling server.
    Subclasses implement `classify(exc)` and may override `underlying(exc)` (the error to report)
    and `retry_after(exc)` (a server's requested wait). `retried` counts retries.
    """

    reads_in_flight = (1, 8)  # (first, most): grown while it pays (corgi_io/reading/in_flight.py, docs/operations.md)

    def __init__(self, root: str, *, retry_seconds: float = 20.0, open_retry_seconds: float = 2.0,
                 backoff: float = 0.1, max_backoff: float = 2.0, max_requests: int = 16):
        super().__init__(root)
        checked = [check_number(name, value) for name, value in
                   zip(RETRY_SETTINGS, (retry_seconds, open_retry_seconds, backoff, max_backoff))]
        self.retry_seconds, self.open_retry_seconds, self.backoff, self.max_backoff = checked
        self.max_requests = check_max_requests(max_requests)
        self.retried = 0
        self._slots = self._slots_pid = None

    def _request_slots(self) -> threading.BoundedSemaphore:
        """This process's semaphore of `max_requests` slots (a forked child does not inherit held slots)."""
        with self._lock:
            if self._slots is None or self._slots_pid != os.getpid():
                self._slots, self._slots_pid = threading.BoundedSemaphore(self.max_requests), os.getpid()
            return self._slots

    def __getstate__(self):
        return {**super().__getstate__(), "_slots": None}

    def classify(self, exc: BaseException) -> str:
        """MISSING (the file is not there), TRANSIENT (a retry may help) or FATAL (it will not)."""
        raise NotImplementedError

    def underlying(self, exc: BaseException) -> BaseException:
        """The error to report and chain for `exc` (a wrapper's cause, say)."""
        return exc

    def retry_after(self, exc: BaseException) -> float | None:
        """Seconds the server asked to wait before the next attempt (`Retry-After`), None if it did not say."""
        return None

    def _retry(self, what: str, relpath: str, offset: int | None, attempt_once, budget: float | None = None):
        """attempt_once(), retried within `budget` s (default `retry_seconds`).

        A missing file or a StorageError of our own is re-raised as is; anything else that ends the
        attempts (a refusal such as a PermissionError at once) becomes a one-line StorageError naming
        the URL, with the cause attached. Each attempt holds one of the `max_requests` slots.
        """
        with waiting():
            return self._attempts(what, relpath, offset, attempt_once,
                                  self.retry_seconds if budget is None else budget)

    def _attempts(self, what: str, relpath: str, offset: int | None, attempt_once, budget: float):
        """`_retry`'s loop: attempts until one returns, the budget is spent, or the failure is final."""
        attempt, first_failure = 0, None
        while True:
            attempt += 1
            try:
                with self._request_slots():
                    return attempt_once()
            except Exception as e:
                kind, now = self.classify(e), time.monotonic()
                if kind == MISSING or isinstance(e, StorageError):
                    raise
                first_failure = now if first_failure is None else first_failure
                waited = now - first_failure
                if kind == FATAL or waited >= budget:
                    cause = self.underlying(e)
                    raise self._gave_up(what, relpath, offset, attempt, waited, cause,
                                        count_attempts=kind == TRANSIENT or attempt > 1) from cause
                asked = self.retry_after(e) or 0.0
            with self._lock:
                self.retried += 1
            time.sleep(min(max(backoff_delay(attempt, self.backoff, self.max_backoff), asked), budget - waited))

    def hint(self, exc: BaseException) -> str:
        """Advice to end the message of a StorageError caused by `exc` with ("" for none)."""
        return ""

    def _gave_up(self, what: str, relpath: str, offset: int | None, attempts: int, waited: float,
                 exc: BaseException, count_attempts: bool) -> StorageError:
        """The one-line StorageError; it counts the attempts unless a fatal error came first (nothing was retried)."""
        where = self.url(relpath) + ("" if offset is None else f" at offset {offset}")
        tries = f" after {attempts} attempt{'s' * (attempts != 1)} in {waited:.1f} s" if count_attempts else ""
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__  # timeouts have no text
        hint = self.hint(exc)
        return StorageError(f"{where}: {what} failed{tries}: {detail}" + (f"; {hint}" if hint else ""))

"""The retry policy shared by remote storages (fsspec, urllib3): classify, back off, give up in time.

A transient failure (network errors, timeouts, HTTP 5xx/408/429) is retried with exponential
backoff and full jitter until a time budget runs out; a missing file (404) or a refusal fails at
once. Each backend maps its own exceptions to MISSING / TRANSIENT / FATAL (`classify`); the loop,
the budget and the one-line StorageError naming URL and offset are the same for all.
"""
from __future__ import annotations

import random
import time

from corgi_io.arguments import RETRY_SETTINGS, check_number
from corgi_io.errors import StorageError
from corgi_io.storage.base import Storage

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


class RetryingStorage(Storage):
    """A Storage whose calls are retried within `retry_seconds` (`open_retry_seconds` for lookups).

    Subclasses implement `classify(exc)` and may override `underlying(exc)` (the error to
    report). `retried` counts retries.
    """

    reads_in_flight = (1, 8)  # (first, most): grown while it pays (corgi_io/reading/in_flight.py, docs/operations.md)

    def __init__(self, root: str, *, retry_seconds: float = 20.0, open_retry_seconds: float = 2.0,
                 backoff: float = 0.1, max_backoff: float = 2.0):
        super().__init__(root)
        checked = [check_number(name, value) for name, value in
                   zip(RETRY_SETTINGS, (retry_seconds, open_retry_seconds, backoff, max_backoff))]
        self.retry_seconds, self.open_retry_seconds, self.backoff, self.max_backoff = checked
        self.retried = 0

    def classify(self, exc: BaseException) -> str:
        """MISSING (the file is not there), TRANSIENT (a retry may help) or FATAL (it will not)."""
        raise NotImplementedError

    def underlying(self, exc: BaseException) -> BaseException:
        """The error to report and chain for `exc` (a wrapper's cause, say)."""
        return exc

    def _retry(self, what: str, relpath: str, offset: int | None, attempt_once, budget: float | None = None):
        """attempt_once(), retried within `budget` s (default `retry_seconds`).

        A missing file, a PermissionError or a StorageError of our own is re-raised as is;
        anything else that ends the attempts becomes a one-line StorageError with the cause attached.
        """
        budget = self.retry_seconds if budget is None else budget
        attempt, first_failure = 0, None
        while True:
            attempt += 1
            try:
                return attempt_once()
            except Exception as e:
                kind, now = self.classify(e), time.monotonic()
                if kind == MISSING or isinstance(e, (PermissionError, StorageError)):
                    raise
                first_failure = now if first_failure is None else first_failure
                waited = now - first_failure
                if kind == FATAL or waited >= budget:
                    cause = self.underlying(e)
                    raise self._gave_up(what, relpath, offset, attempt, waited, cause,
                                        count_attempts=kind == TRANSIENT or attempt > 1) from cause
            with self._lock:
                self.retried += 1
            time.sleep(min(backoff_delay(attempt, self.backoff, self.max_backoff), budget - waited))

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

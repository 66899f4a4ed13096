"""One writer per OUTPUT in an object store: the lock object ``<OUTPUT>/.corgi-lock`` of `corgi pack`.

The lock is created with a conditional write (S3's ``If-None-Match: *``, upload.ObjectWriter.create):
S3 makes the object only if no object has its name, so of two runs exactly one gets it, on any
hosts.  It holds the run's details (a random run id, host, pid, start time: locks.holder_details),
written in the same request, so no lock is ever seen without them.  The holder deletes it when its
run ends, however it ends short of a kill, and only while it still holds its run id.  Before the
manifest is uploaded the holder checks that the lock is still its own (`check`), so a run whose lock
was broken by hand stops before it publishes.

A run killed with SIGKILL leaves the lock behind.  A run on the same host tells that its holder is
gone (its pid no longer runs: locks.process_runs), warns, deletes it and takes the lock; since S3
has no conditional delete, it then waits SETTLE_SECONDS and reads the lock back, so that of two runs
clearing one stale lock at once only the one whose lock stayed goes on.  A holder on another host
cannot be checked from here: the run refuses, naming the lock's URL and how to delete it.
"""
from __future__ import annotations

import json
import socket
import time
import uuid

from corgi_io.errors import PackError
from corgi_io.storage.locks import LOCK_NAME, MAX_DETAILS, HeldLock, describe_holder, holder_details, parse_details, \
    process_runs
from corgi_io.storage.upload import ObjectWriter

ATTEMPTS = 5          # tries at creating the lock while others create or delete it
SETTLE_SECONDS = 1.0  # after clearing a stale lock: how long another run clearing it too may take to write its own


class ObjectLock(HeldLock):
    """The lock of the objects under `writer`'s URL, held from `acquire` to `release`; a context manager.
    `warn(message)` hears of a stale lock removed."""

    def __init__(self, writer: ObjectWriter, warn):
        self.writer, self.warn, self.url = writer, warn, writer.url_of(LOCK_NAME)
        self.details = {**holder_details(), "run": uuid.uuid4().hex}
        self.held = False

    def acquire(self) -> None:
        """Create the lock; PackError (one line naming the holder and the lock's URL) when another run holds it."""
        cleared = False
        for _ in range(ATTEMPTS):
            if self.writer.create(LOCK_NAME, json.dumps(self.details).encode()):
                self.held = True
                if cleared:
                    time.sleep(SETTLE_SECONDS)
                    self.check()
                return
            holder = self._holder()
            if holder is not None and _stale(holder):
                self.writer.delete([LOCK_NAME])
                self.warn(f"{self.url}: removed the lock of a run that is gone ({describe_holder(holder)})")
                cleared = True
            elif holder is not None:
                raise PackError(_held_message(self.url, holder))
        raise PackError(f"{self.url}: still held after {ATTEMPTS} tries; if no corgi pack writes {self.writer.url}, "
                        f"delete the lock ({_delete_hint(self.url)})")

    def check(self) -> None:
        """PackError unless the lock still holds this run's id (it was deleted, or another run took it)."""
        holder = self._holder()
        if holder is None or holder.get("run") != self.details["run"]:
            self.held = False
            taken = f"is now held by {describe_holder(holder)}" if holder else "is gone"
            raise PackError(f"{self.url}: this run's lock {taken}; another corgi pack may be writing "
                            f"{self.writer.url}: rerun when none is")

    def release(self) -> None:
        """Delete the lock if it is still this run's; a failure is only warned of (the next run finds it stale)."""
        if not self.held:
            return
        self.held = False
        try:
            holder = self._holder()
            if holder is not None and holder.get("run") == self.details["run"]:
                self.writer.delete([LOCK_NAME])
        except OSError as exc:
            self.warn(f"{self.url}: could not remove the lock: {exc}")

    def _holder(self):
        """The lock's details, or None when it is gone.  Malformed ones refuse at once (nothing to judge by)."""
        data = self.writer.read(LOCK_NAME, MAX_DETAILS)
        if data is None:
            return None
        holder = parse_details(data)
        if holder is None:
            raise PackError(f"{self.url}: another corgi pack holds it (its lock names no holder); if none is "
                            f"running, delete the lock ({_delete_hint(self.url)})")
        return holder


def _stale(holder: dict) -> bool:
    """Whether the lock's run is known to be gone: on this host, with its pid no longer running."""
    return holder["host"] == socket.gethostname() and not process_runs(holder["pid"])


def _delete_hint(url: str) -> str:
    return f"aws s3 rm {url}, with --endpoint-url for another store"


def _held_message(url: str, holder: dict) -> str:
    """One line: who holds the lock, since when, and how to clear it if that run is gone."""
    return (f"{url}: another corgi pack is writing {url.rsplit('/', 1)[0]} ({describe_holder(holder)}, "
            f"run {holder.get('run', '?')}); wait for it to finish, or if that run is gone delete the lock "
            f"({_delete_hint(url)})")

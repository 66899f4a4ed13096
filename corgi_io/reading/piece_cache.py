"""The cache of remote pieces on the read path: pieces kept on local disk, evicted by their next use.

A piece (one ranged read: the records of samples start..stop of one block) read from remote
storage is checked against the manifest's checksums, passed on to the reader, and handed to the
cache's writer (`cache_writer.CacheWriter`), which writes in the background, off the read path:
there the reader's `CacheBook` (`corgi_io.schedule.eviction`: Belady over the known future, or
LRU) says whether to keep it and which cached pieces to delete for it, and the `CacheFolder` puts
it in place whole.  When the writer's queue is full the piece is simply not cached.  A read finds a
cached piece, checks it again (a file that fails is deleted and fetched again) and fetches
nothing.  Several processes share one folder: a piece being fetched is locked, from before its
fetch until it is written (or not queued), so that nobody fetches it twice at once, and the sizes
are listed and changed under the folder's lock, so that the limit holds for all of them.  `warm`
fetches pieces for later in a background thread (the next epoch's first pieces, while this epoch ends).

A shard's size is checked against the manifest on its first *fetch* in this process, not on
its first read: a piece served from the cache passed its checksums against this manifest, so
an epoch read wholly from the cache needs no server.  A full disk (ENOSPC, EDQUOT), or any
other failure of a background write, never stops the reads: the first write that meets one warns
once, naming the folder, and this cache writes nothing more for the rest of its process (it still
reads what is cached).  Retrying
would write and delete a whole piece per fetch to learn the disk is still full, and evicting
for room would delete pieces the other processes of the folder count on; a new process (the
next epoch's non-persistent workers, the next run) tries again.
"""
from __future__ import annotations

import contextlib
import threading
import warnings

from corgi_io.errors import CorgiError, CorruptDataError
from corgi_io.reading.cache_writer import CacheWriter
from corgi_io.schedule.eviction import piece_key
from corgi_io.storage.cache_folder import disk_full


def warn_disk_full(path, exc: OSError) -> None:
    """The one warning of a cache that stops writing for a full disk: its folder and the disk's error, on one line."""
    warnings.warn(f"{path}: cache disk full ({exc.strerror or exc}): this process reads on without caching "
                  f"(free space, or lower Cache(folder, limit)'s limit below the disk's free space)", stacklevel=2)


def warn_write_failed(path, exc: Exception) -> None:
    """The one warning of a cache that stops writing: a full disk's, or the error a piece's write met."""
    if disk_full(exc):
        return warn_disk_full(path, exc)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    warnings.warn(f"{path}: cache write failed ({type(exc).__name__}: {reason}): this process reads on without "
                  f"caching", stacklevel=2)


class PieceCache:
    """Pieces of one pack kept in a `CacheFolder` under a `CacheBook`'s policy, checked by a `PieceVerifier`
    when fetched (before they are written) and whenever they are read back.  Counts its hits (reads of the known
    future served from the folder; a prefetch's is none), fetches and refetches (cached files that failed their
    check); `writing` turns False for good on a full disk or a failed write; `writer.dropped` counts the fetched
    pieces left uncached because the writer's queue was full."""

    def __init__(self, folder, book, verifier):
        self.folder, self.book, self.verifier = folder, book, verifier
        self.hits = self.fetches = self.refetches = 0
        self.writing = True
        self._lock = threading.Lock()  # the book, the counters and `writing`, shared by the reading threads
        self._warming = None  # the latest `warm` thread
        self.writer = CacheWriter(self._store)

    def plan(self, pieces) -> None:
        """The known future from now on: `pieces`, in the order they will be read."""
        with self._lock:
            self.book.plan([piece_key(piece) for piece in pieces])

    def read(self, piece, fetch, advance: bool = True, wait: bool = False) -> bytes:
        """The piece's records: a checked cached copy, else `fetch()` (checked, and offered to the writer).

        `advance`: this read is the next step of the known future (False for a prefetch for later); `wait`: when
        the writer's queue is full, wait for room (a prefetch thread) instead of leaving the piece uncached.
        CorruptDataError when the fetched bytes themselves fail their check (nothing is cached then).
        """
        key = piece_key(piece)
        data = self._cached(piece, key, remove_bad=False)
        if data is None and self.writing:
            with self._write_failure_stops_writing(), contextlib.ExitStack() as held:
                held.enter_context(self.folder.fetching(key))  # until written, or not queued
                data = self._cached(piece, key, remove_bad=True)  # another process may just have fetched it
                if data is None:
                    return self._fetch(piece, key, fetch, advance, (held, wait))
        if data is None:  # not writing (the disk is full): no lock for the others to wait on
            return self._fetch(piece, key, fetch, advance)
        with self._lock:
            if advance:  # a prefetch that finds its piece cached (just written for the read it waited on) serves none
                self.hits += 1
            self.book.access(key, advance)
        return data

    def _cached(self, piece, key: str, remove_bad: bool) -> bytes | None:
        """The cached piece if it is there and passes its check; a bad one is deleted (`remove_bad`, under the
        piece's lock, so that a good copy another process has just written is never the one deleted)."""
        data = self.folder.read(key)
        if data is None:
            return None
        try:
            self.verifier.check_piece(piece, data)
        except CorruptDataError:
            if remove_bad:
                self.folder.remove(key)
                with self._lock:
                    self.refetches += 1
            return None
        return data

    def _fetch(self, piece, key: str, fetch, advance: bool, offer=None) -> bytes:
        """Fetch and check the piece (its shard's size first, once per process); `offer`: (the ExitStack holding
        the piece's lock, whether to wait for room), to hand the piece and its lock to the writer."""
        self.verifier.check_size_of(piece)
        data = fetch()
        self.verifier.check_piece(piece, data)
        with self._lock:
            self.fetches += 1
            self.book.access(key, advance)
        if offer is not None and self.writing:
            held, wait = offer
            lock = held.pop_all()
            if not self.writer.offer((key, data, lock), len(data), wait):
                lock.close()  # not cached: the others may fetch it now
        return data

    def _store(self, item) -> None:
        """The writer's job for one fetched piece (key, bytes, its lock): evict for it and write it if the
        policy admits it, then let go of its lock.  A write that fails stops the writing, with one warning."""
        key, data, lock = item
        with lock, self._write_failure_stops_writing(everything=True):
            if self.writing:
                self._keep(key, data)

    def _keep(self, key: str, data: bytes) -> None:
        """Under the folder's lock, evict what the policy says for the fetched piece `key` and write it if admitted."""
        with self.folder.accounting():
            sizes = self.folder.sizes()
            with self._lock:
                decision = self.book.decide(key, len(data), sizes)
            for victim in decision.evict:
                self.folder.remove(victim)
            if decision.admit:
                self.folder.write(key, data)

    @contextlib.contextmanager
    def _write_failure_stops_writing(self, everything: bool = False):
        """Swallow a full disk's OSError (ENOSPC, EDQUOT), or with `everything` any error of a background write,
        stop writing, and warn the first time."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - the writer's failures end the caching, never the reads
            if not (disk_full(exc) or everything):
                raise
            with self._lock:
                first, self.writing = self.writing, False
            if first:
                warn_write_failed(self.folder.path, exc)

    def warm(self, items) -> None:
        """Fetch `items` ((piece, bytes, fetch) each) into the cache in a background thread, without moving the
        position in the known future; a piece already cached, or one the policy would not keep, is skipped.

        A failure ends the warming quietly: the read of that piece in its place meets it and raises it.
        """
        def run():
            try:
                for piece, nbytes, fetch in items:
                    if self._worth_fetching(piece_key(piece), nbytes):
                        self.read(piece, fetch, advance=False, wait=True)
            except (CorgiError, OSError):
                return

        self._warming = threading.Thread(target=run, name="corgi-cache-warm", daemon=True)
        self._warming.start()

    def wait_warm(self) -> None:
        """Return once the latest `warm` has finished and every fetched piece is written (to count the bytes, or
        before the folder is removed)."""
        if self._warming is not None:
            self._warming.join()
        self.writer.flush()

    def _worth_fetching(self, key: str, nbytes: int) -> bool:
        """Whether a prefetch of `key` would be kept: writing, not cached, and admitted by the policy now."""
        if not self.writing:
            return False
        sizes = self.folder.sizes()
        if key in sizes:
            return False
        with self._lock:
            self.book.access(key, advance=False)
            return self.book.decide(key, nbytes, sizes).admit

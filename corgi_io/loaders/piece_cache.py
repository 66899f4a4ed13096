"""A dataset's cache of remote pieces (`Cache(folder, limit, policy=)`), one per process.

Each process (the main one, or a DataLoader worker) keeps its own `PieceCache` over the shared
folder ``<Cache folder>/<pack fingerprint>``, with its own `CacheBook`: the future it knows is its
own read order, the rest of this epoch's plan then the whole next epoch's (a pure function of
seed and epoch), and when the reads of this epoch's last buffer are under way it prefetches the
first `Reading(prefetch_blocks=)` pieces of the next epoch.  Local packs are never cached.  See
docs/operations.md ("Caching remote packs") and docs/algorithms.md ("Cache eviction").
"""
from __future__ import annotations

import os

from corgi_io.reading.piece_cache import PieceCache, warn_disk_full
from corgi_io.reading.read_checks import PieceVerifier
from corgi_io.schedule.eviction import CacheBook
from corgi_io.storage.cache_folder import CacheFolder, disk_full

FINGERPRINT_CHARS = 16  # of the pack's fingerprint, naming its folder in cache_dir


class RemoteCache:
    """The `PieceCache` of one dataset in this process, built on first use (and again in a new process);
    copies (spawned workers, pickles) carry only the options."""

    def __init__(self, spec):
        self.spec, self._cache, self._pid = spec, None, None

    def __getstate__(self):
        return {"spec": self.spec, "_cache": None, "_pid": None}

    def for_reading(self, manifest, storage, pack: str) -> PieceCache | None:
        """This process's cache of the pack of fingerprint `pack`, or None: no cache_dir, a local pack, or a
        folder that a full disk left uncreated (warned once)."""
        if self.spec.cache_dir is None or storage.local_path("") is not None:
            return None
        if self._pid != os.getpid():
            self._cache, self._pid = self._open(manifest, storage, pack), os.getpid()
        return self._cache

    def rows_folder(self, pack: str) -> str | None:
        """The folder beside the pack's pieces where a node's processes keep its row groups (None: no cache)."""
        return None if self.spec.cache_dir is None else os.path.join(self.spec.cache_dir,
                                                                     pack[:FINGERPRINT_CHARS] + "-rows")

    def _open(self, manifest, storage, pack: str) -> PieceCache | None:
        """A new `PieceCache` in the pack's folder of `cache_dir`; None, with the warning, when the disk is full."""
        path = os.path.join(self.spec.cache_dir, pack[:FINGERPRINT_CHARS])
        try:
            folder = CacheFolder(path)
        except OSError as exc:
            if not disk_full(exc):
                raise
            warn_disk_full(path, exc)
            return None
        return PieceCache(folder, CacheBook(self.spec.cache_policy, self.spec.cache_limit),
                          PieceVerifier(manifest, storage))


def cached_epoch(readers, plan, local, next_plan, next_local, prefetch: int):
    """`plan`'s buffers, as `readers` (one `PieceReader` per source) read them through their caches.

    First each source's cache learns its known future: its pieces of this plan, then of `next_plan` (`local` and
    `next_local` map a planned piece to (source, piece of that source's pack)); once the last buffer has been taken
    (its reads are under way), the first `prefetch` pieces of `next_plan` are fetched into the caches in the
    background."""
    plan = list(plan)
    now = [local(piece) for pieces, _ in plan for piece in pieces.tolist()]
    upcoming = [next_local(piece) for pieces, _ in next_plan for piece in pieces.tolist()]
    for s, reader in enumerate(readers):
        if reader.cache is not None:
            reader.cache.plan([piece for source, piece in now + upcoming if source == s])
    yield from plan
    for s, reader in enumerate(readers):
        if prefetch and reader.cache is not None:
            reader.warm([piece for source, piece in upcoming[:prefetch] if source == s])

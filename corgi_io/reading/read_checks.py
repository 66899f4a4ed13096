"""The verify stage of the read path: no byte leaves the loader unchecked.

Two checks run on every piece the reader fetches, in the reading thread, before any of
the piece's samples can be yielded:

* the first read of each shard (per process) compares the shard's size with the manifest's (over HTTP,
  the size its answer's Content-Range gives: no request of its own), so a truncated, extended or
  swapped shard fails before its samples are used, without a
  metadata call per shard at start-up (at 100 TB in 512 MiB shards that would be ~190k stat
  or HEAD calls per rank); through a cache of remote pieces, the first *fetch* of each shard
  (`corgi_io.reading.piece_cache`): a piece served from the cache is the manifest's bytes by its
  checksums, so an epoch read wholly from the cache asks the server nothing;
* every record's checksum is compared with the manifest's.  Version-2 checksums run through
  each block (see checksum.py), so a whole piece is checked with one CRC32C call that releases
  the GIL; only a piece that fails is walked record by record, to name the first bad one.
  Version-1 packs (per-record zlib CRC32) are checked record by record.

Either failure raises :class:`CorruptDataError` naming the shard, the byte offset and the
sample key.  `bench/load.py` prints checked and unchecked throughput side by side.
"""
from __future__ import annotations

import threading

from corgi_io.manifest.checksum import RUNNING, checksum_function, mismatched_records
from corgi_io.errors import CorruptDataError, StorageError


class PieceVerifier:
    """Checks the shard size (once per shard) and every record checksum of the pieces read from `storage`."""

    def __init__(self, manifest, storage):
        self.manifest, self.storage = manifest, storage
        self.checksum, self.running = checksum_function(manifest.checksum), RUNNING[manifest.checksum]
        self._sized: set = set()     # shard ids whose size this process has checked
        self._sizing: dict = {}      # shard id -> the lock its first check holds
        self._lock = threading.Lock()  # several reading threads share one verifier

    def check_shard_size(self, shard_id: int) -> None:
        """Compare a shard's size on storage with the manifest, the first time this process reads it: one size
        request per shard, however many reading threads start on it at once (they wait for the first)."""
        with self._lock:
            if shard_id in self._sized:
                return
            shard_lock = self._sizing.setdefault(shard_id, threading.Lock())
        with shard_lock:
            if shard_id not in self._sized:
                self._check_size(shard_id)

    def sized_read(self, shard_id: int, read):
        """`read()` of a piece of shard `shard_id`, its shard's size checked on the first read: before it, or, where
        the storage learns sizes from its answers (`Storage.sizes_from_reads`: HTTP's Content-Range), after it, from
        that answer, with no request of its own (a round trip fewer before each process's first piece).  A read
        that failed on a shard that changed size raises the shard's CorruptDataError, not the read's error."""
        if not self.storage.sizes_from_reads or shard_id in self._sized:
            self.check_shard_size(shard_id)
            return read()
        try:
            data = read()
        except FileNotFoundError:
            raise self._missing(shard_id) from None
        except StorageError:
            if self.storage.known_size(self.manifest.shards[shard_id].path) is not None:
                self.check_shard_size(shard_id)  # the answer told a size: a shorter shard is named as such
            raise
        self.check_shard_size(shard_id)
        return data

    def _check_size(self, shard_id: int) -> None:
        shard = self.manifest.shards[shard_id]
        try:
            actual = self.storage.known_size(shard.path)
            actual = self.storage.size(shard.path) if actual is None else actual
        except FileNotFoundError:
            raise self._missing(shard_id) from None
        if actual != shard.bytes:
            change, offset = ("truncated", actual) if actual < shard.bytes else ("grown", shard.bytes)
            raise CorruptDataError(f"{self.storage.url(shard.path)}: byte offset {offset}: shard is {actual} bytes, "
                                   f"the manifest says {shard.bytes} ({change} or replaced)", shard=shard.path,
                                   offset=offset)
        with self._lock:
            self._sized.add(shard_id)

    def _missing(self, shard_id: int) -> StorageError:
        return StorageError(f"{self.storage.url(self.manifest.shards[shard_id].path)}: shard listed in the manifest "
                            "is missing")

    def check_size_of(self, piece) -> None:
        """`check_shard_size` of the shard that holds `piece` (block, start, stop)."""
        self.check_shard_size(int(self.manifest.samples.shard[int(piece[1])]))

    def check_piece(self, piece, data: bytes) -> None:
        """Raise CorruptDataError at the first record of `piece` (block, start, stop) whose checksum differs.

        `data` holds the piece's records back to back.  O(1) Python for an intact version-2 piece.
        """
        block, start, stop = (int(x) for x in piece)
        s = self.manifest.samples
        previous = int(s.checksum[start - 1]) if self.running and start > int(self.manifest.blocks.first[block]) else 0
        if self.running and self.checksum(data, previous) == int(s.checksum[stop - 1]):
            return
        offsets, lengths, expected = (column[start:stop].tolist() for column in (s.offset, s.length, s.checksum))
        bad = mismatched_records(self.manifest.checksum, data, offsets, lengths, expected, previous)
        if bad:  # a failed running piece always has a bad record: the records' checks chain into the piece's
            self._mismatch(start + bad[0], offsets[bad[0]])

    def _mismatch(self, index: int, offset: int):
        m = self.manifest
        path = m.shards[int(m.samples.shard[index])].path
        key = m.key(index)
        raise CorruptDataError(f"{self.storage.url(path)}: byte offset {offset}: sample {key!r}: "
                               f"{m.checksum} mismatch (the record's bytes changed since it was packed)",
                               shard=path, offset=offset, key=key)

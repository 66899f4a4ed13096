"""The verify stage of the read path: no byte leaves the loader unchecked.

Two checks run on every piece the reader fetches, in the reading thread, before any of
the piece's samples can be yielded:

* the first read of each shard (per process) compares the shard's size with the manifest's,
  so a truncated, extended or swapped shard fails before its samples are used, without a
  metadata call per shard at start-up (at 100 TB in 512 MiB shards that would be ~190k stat
  or HEAD calls per rank);
* every record's checksum (CRC32C for version-2 packs) is compared with the manifest's.

Either failure raises :class:`CorruptDataError` naming the shard, the byte offset and the
sample key.  The cost is one hardware CRC pass over the bytes (about 16 GB/s here) plus a
little Python per sample; `bench/load.py` prints checked and unchecked throughput side by side.
"""
from __future__ import annotations

import threading

from corgi_io.checksum import checksum_function
from corgi_io.errors import CorruptDataError, StorageError


class PieceVerifier:
    """Checks the shard size (once per shard) and every record checksum of the pieces read from `storage`."""

    def __init__(self, manifest, storage):
        self.manifest, self.storage = manifest, storage
        self.checksum = checksum_function(manifest.checksum)
        self._sized: set = set()     # shard ids whose size this process has checked
        self._lock = threading.Lock()  # several reading threads share one verifier

    def check_shard_size(self, shard_id: int) -> None:
        """Compare a shard's size on storage with the manifest, the first time this process reads it."""
        with self._lock:
            if shard_id in self._sized:
                return
        shard = self.manifest.shards[shard_id]
        try:
            actual = self.storage.size(shard.path)
        except FileNotFoundError:
            raise StorageError(f"{self.storage.url(shard.path)}: shard listed in the manifest is missing") from None
        if actual != shard.bytes:
            change, offset = ("truncated", actual) if actual < shard.bytes else ("grown", shard.bytes)
            raise CorruptDataError(f"{self.storage.url(shard.path)}: byte offset {offset}: shard is {actual} bytes, "
                                   f"the manifest says {shard.bytes} ({change} or replaced)", shard=shard.path,
                                   offset=offset)
        with self._lock:
            self._sized.add(shard_id)

    def check_records(self, start: int, stop: int, data: bytes) -> None:
        """Raise CorruptDataError at the first record of samples [start, stop) whose checksum differs.

        `data` holds the records' bytes back to back, from sample `start`'s record onwards.
        """
        s = self.manifest.samples
        offsets, lengths = s.offset[start:stop].tolist(), s.length[start:stop].tolist()
        base, view, checksum = offsets[0], memoryview(data), self.checksum
        for index, offset, length, expected in zip(range(start, stop), offsets, lengths,
                                                   s.checksum[start:stop].tolist()):
            if checksum(view[offset - base:offset - base + length]) != expected:
                self._mismatch(index, offset)

    def _mismatch(self, index: int, offset: int):
        m = self.manifest
        path = m.shards[int(m.samples.shard[index])].path
        key = m.key(index)
        raise CorruptDataError(f"{self.storage.url(path)}: byte offset {offset}: sample {key!r}: "
                               f"{m.checksum} mismatch (the record's bytes changed since it was packed)",
                               shard=path, offset=offset, key=key)

"""Executing a worker's buffer plan: one ranged read per piece, read ahead in a thread, samples out in order.

The reader walks the plan from `corgi_io.schedule.buffer_plan` and reads each piece (a
run of whole samples inside one block) with a single ranged read, on a few threads so
that several reads are in flight (it matters for HTTP, object stores and Lustre RPCs),
at most `prefetch_pieces` pieces ahead of the consumer.  The consumer splits each piece into payloads
using the manifest's offsets (no parsing of tar or TFRecord framing on the hot path)
and yields them in the plan's order.

Memory bound: the resident sample data is at most the current buffer's pieces, plus
`prefetch_pieces` pieces read or in flight; in window mode the window (as many samples
as the buffer's blocks hold) plus the one piece being pushed through it replace the
buffer.  `peak_resident_bytes` records the observed maximum.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

from corgi_io.manifest import KINDS, Manifest
from corgi_io.read_checks import PieceVerifier


class BlockReader:
    """Reads the pieces of a buffer plan through a Storage, `prefetch_pieces` ahead.

    With `verify` (the default) every piece passes `PieceVerifier` in the reading thread: its
    shard's size and every record's checksum are checked before any of its samples is yielded.
    """

    def __init__(self, manifest: Manifest, storage, prefetch_pieces: int = 16, read_threads: int | None = None,
                 verify: bool = True):
        self.manifest, self.storage = manifest, storage
        self.verifier = PieceVerifier(manifest, storage) if verify else None
        self.prefetch_pieces = max(1, prefetch_pieces)
        threads = storage.concurrent_reads if read_threads is None else read_threads
        self.read_threads = max(1, min(threads, self.prefetch_pieces))
        self.peak_resident_bytes = 0   # max over time of (payloads held + pieces read or being read)

    def byte_range(self, piece) -> tuple:
        """(shard path, offset, length) of one piece: first record's start to last record's end."""
        _, start, stop = (int(x) for x in piece)
        s = self.manifest.samples
        offset = int(s.offset[start])
        return self.manifest.shards[int(s.shard[start])].path, offset, int(s.offset[stop - 1] + s.length[stop - 1]) - offset

    def samples(self, plan):
        """Yield sample dicts (index, key, label, size, kind, ext, data) in the plan's order, reading every piece once.

        A sample listed twice (padding can repeat one on a worker) is yielded as two distinct dicts.
        """
        resident: dict = {}      # sample index -> sample dict, read but not yet yielded
        repeats: dict = {}       # extra listings of a resident sample
        resident_bytes = committed_bytes = 0  # payloads held; bytes of reads submitted but not yet split
        steps = ((piece, order) for pieces, order in plan for piece in [*pieces, None])  # None: buffer complete
        ahead: deque = deque()   # (future read of a piece, or None, buffer order)
        reads_ahead = 0          # futures in `ahead`
        with ThreadPoolExecutor(self.read_threads, thread_name_prefix="corgi-read") as pool:
            try:
                while True:
                    while reads_ahead < self.prefetch_pieces:
                        step = next(steps, None)
                        if step is None:
                            break
                        piece, order = step
                        if piece is not None:
                            reads_ahead += 1
                            committed_bytes += self.byte_range(piece)[2]
                            self.peak_resident_bytes = max(self.peak_resident_bytes, resident_bytes + committed_bytes)
                        ahead.append((None if piece is None else pool.submit(self._read, piece), order))
                    if not ahead:
                        return
                    future, order = ahead.popleft()
                    if future is not None:
                        reads_ahead -= 1
                        piece, data = future.result()
                        committed_bytes -= len(data)
                        resident_bytes += self._split(piece, data, resident, repeats)
                        continue
                    for index in order.tolist():
                        if repeats.get(index):
                            repeats[index] -= 1
                            yield dict(resident[index])
                            continue
                        sample = resident.pop(index)
                        resident_bytes -= len(sample["data"])
                        yield sample
            finally:
                for future, _ in ahead:
                    if future is not None:
                        future.cancel()

    def _read(self, piece):
        """Read one piece (in a reading thread) and, with verification on, check it before it is split."""
        _, start, stop = (int(x) for x in piece)
        self.manifest.validate_rows(start, stop)  # the piece's rows, once per block, before they are trusted
        if self.verifier is not None:
            self.verifier.check_shard_size(int(self.manifest.samples.shard[start]))
        data = self.storage.read_range(*self.byte_range(piece))
        if self.verifier is not None:
            self.verifier.check_piece(piece, data)
        return piece, data

    def _split(self, piece, data: bytes, resident: dict, repeats: dict) -> int:
        """Cut a piece into sample dicts by the manifest's payload offsets; returns the bytes added."""
        m, s = self.manifest, self.manifest.samples
        _, start, stop = (int(x) for x in piece)
        begins = (s.data_offset[start:stop] - s.offset[start]).tolist()
        kinds = [KINDS[k] for k in s.kind[start:stop].tolist()]
        exts = [m.extensions[e] for e in s.ext[start:stop].tolist()]
        added = 0
        for index, key, label, size, begin, nbytes, kind, ext in zip(
                range(start, stop), m.keys(start, stop), s.label[start:stop].tolist(), s.size[start:stop].tolist(),
                begins, s.bytes[start:stop].tolist(), kinds, exts):
            if index in resident:
                repeats[index] = repeats.get(index, 0) + 1
                continue
            resident[index] = {"index": index, "key": key, "label": label, "size": size, "kind": kind, "ext": ext,
                               "data": data[begin:begin + nbytes]}
            added += nbytes
        return added

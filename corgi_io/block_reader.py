"""Executing a worker's buffer plan: one ranged read per piece, read ahead in a thread, samples out in order.

A background thread walks the plan from `corgi_io.schedule.buffer_plan` and reads each
piece (a run of whole samples inside one block) with a single ranged read, at most
`prefetch_pieces` ahead of the consumer.  The consumer splits each piece into payloads
using the manifest's offsets (no parsing of tar or TFRecord framing on the hot path)
and yields them in the plan's order.

Memory bound: the resident sample data is at most the current buffer's pieces, plus
`prefetch_pieces` pieces queued, plus one piece being read; in window mode the window
itself replaces the buffer.  `peak_resident_bytes` records the observed maximum.
"""
from __future__ import annotations

import queue
import threading
from collections import Counter
from typing import NamedTuple

import numpy as np

from corgi_io.manifest import Manifest

_END = object()


class RawSample(NamedTuple):
    """One sample as read: its global index and payload bytes."""

    index: int
    data: bytes


class BlockReader:
    """Reads the pieces of a buffer plan through a Storage, `prefetch_pieces` ahead."""

    def __init__(self, manifest: Manifest, storage, prefetch_pieces: int = 16):
        self.manifest, self.storage = manifest, storage
        self.prefetch_pieces = max(1, prefetch_pieces)
        self.peak_resident_bytes = 0   # max over time of (split payloads held + piece bytes queued)
        self._queued_bytes = 0
        self._lock = threading.Lock()

    def byte_range(self, piece) -> tuple:
        """(shard path, offset, length) of one piece: first record's start to last record's end."""
        _, start, stop = (int(x) for x in piece)
        s = self.manifest.samples
        offset = int(s.offset[start])
        return self.manifest.shards[int(s.shard[start])].path, offset, int(s.offset[stop - 1] + s.length[stop - 1]) - offset

    def samples(self, plan):
        """Yield RawSample in the order the plan lists them, reading every piece exactly once."""
        pieces: queue.Queue = queue.Queue(maxsize=self.prefetch_pieces)
        stop = threading.Event()
        failure = []
        thread = threading.Thread(target=self._read_ahead, args=(plan, pieces, stop, failure), daemon=True)
        thread.start()
        resident: dict = {}      # sample index -> payload, read but not yet yielded
        remaining = Counter()    # how many more times a resident sample is listed (padding may repeat one)
        resident_bytes = 0
        try:
            while True:
                item = pieces.get()
                if item is _END:
                    break
                if isinstance(item, np.ndarray):  # a buffer's yield order: every listed sample is resident
                    for index in item.tolist():
                        data = resident[index]
                        remaining[index] -= 1
                        if not remaining[index]:
                            del resident[index], remaining[index]
                            resident_bytes -= len(data)
                        yield RawSample(index, data)
                    continue
                piece, data = item
                with self._lock:
                    self.peak_resident_bytes = max(self.peak_resident_bytes, resident_bytes + self._queued_bytes)
                    self._queued_bytes -= len(data)
                resident_bytes += self._split(piece, data, resident, remaining)
        finally:
            stop.set()
            while thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    pieces.get_nowait()
                except queue.Empty:
                    thread.join(0.01)
        if failure:
            raise failure[0]

    def _split(self, piece, data: bytes, resident: dict, remaining: Counter) -> int:
        s = self.manifest.samples
        _, start, stop = (int(x) for x in piece)
        base = int(s.offset[start])
        added = 0
        for index, begin, size in zip(range(start, stop), (s.data_offset[start:stop] - base).tolist(),
                                      s.bytes[start:stop].tolist()):
            if index not in resident:
                resident[index] = data[begin:begin + size]
                added += size
            remaining[index] += 1
        return added

    def _read_ahead(self, plan, pieces: queue.Queue, stop: threading.Event, failure: list) -> None:
        try:
            for buffer_pieces, order in plan:
                for piece in buffer_pieces:
                    if stop.is_set():
                        return
                    data = self.storage.read_range(*self.byte_range(piece))
                    with self._lock:
                        self._queued_bytes += len(data)
                    pieces.put((piece, data))
                pieces.put(order)
        except BaseException as exc:  # surfaced in the consumer, which owns the error path
            failure.append(exc)
        finally:
            pieces.put(_END)

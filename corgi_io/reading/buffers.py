"""Read buffers reused across pieces, for the raw-batch stage (raw_batches), which knows when a piece's bytes are free.

A piece is a few MiB.  Read into a fresh buffer, it costs the kernel a page fault per 4 KiB on
top of the copy: on bench/load.py's corpus, 75 ms of page faults an epoch against 14 ms of reading
(and worse with several reading threads, which fault under one lock).  The per-sample path cannot
reuse a piece's memory (its samples are copies, the piece is left to the allocator); the batch
stage gives each piece back once its last row is batched (or copied out), so the next read fills
memory already mapped.  The pool keeps what it was given: at most the most pieces held at once.

A batch's own buffer (`bytes`, a few MiB) cannot come from the pool: whoever gets the batch keeps
it as long as it likes.  glibc's malloc maps an allocation above its mmap threshold (128 KiB at
first) fresh from the kernel and unmaps it when freed, so every such batch pays a page fault per
4 KiB again; freeing one mapped buffer raises the threshold to that buffer's size (glibc's own
rule, up to 32 MiB), and from then on batches reuse the heap's memory.  `warm_batch_memory` frees
one of `BATCH_MEMORY` bytes, once per process: on bench/load.py's corpus, 16,900 faults an epoch
become 200, and the gather 90 ms -> 25 ms.  The heap may then keep up to twice that much freed
memory for reuse (glibc's trim threshold follows).  Elsewhere than glibc it is one allocation.
"""
from __future__ import annotations

import functools
import threading

GRAIN = 1 << 20  # buffers are whole MiB
BATCH_MEMORY = 16 << 20  # the mmap threshold `warm_batch_memory` leaves: more than a batch of bench/load.py's


@functools.cache
def warm_batch_memory() -> None:
    """Once per process, allocate and free `BATCH_MEMORY` bytes, so that malloc serves later batch buffers from
    memory it keeps (see the module)."""
    bytes(BATCH_MEMORY)  # zeroed by calloc: mapped, never touched, then freed


class BufferPool:
    """Byte buffers to read pieces into: `take(n)` one of at least n bytes (a view of exactly n), `give` it back."""

    def __init__(self):
        self._free: list = []          # bytearrays given back, smallest first
        self._lock = threading.Lock()  # reading threads take, the consumer gives

    def take(self, nbytes: int) -> memoryview:
        """A writable view of `nbytes` bytes: the smallest free buffer that holds them, else a new one."""
        with self._lock:
            fit = next((i for i, buffer in enumerate(self._free) if len(buffer) >= nbytes), None)
            buffer = self._free.pop(fit) if fit is not None else None
        if buffer is None:  # whole MiB, so that the next piece, a little larger, fits too
            buffer = bytearray(-(-nbytes // GRAIN) * GRAIN)
        return memoryview(buffer)[:nbytes]

    def give(self, view: memoryview) -> None:
        """A view from `take` whose bytes nobody reads any more."""
        with self._lock:
            self._free.append(view.obj)
            self._free.sort(key=len)

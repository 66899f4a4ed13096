"""The raw-batch stage: a buffer plan's batches of raw bytes gathered straight from the read pieces, as numpy rows.

The per-sample path (`order.py`) makes a dict per sample and copies each payload out of its
piece; a collate then copies the payloads again into one buffer.  For batches of raw bytes this
stage keeps each piece's bytes whole and its samples as numpy rows (`PieceSplitter.columns`:
payload bounds, index, key, label, size, kind, ext, and `source` in a blend), and builds a batch
with numpy: the batch's ids are looked up in the resident rows (kept sorted by id), its columns
gathered by fancy indexing, and its payloads joined into one buffer by one `bytes.join` over
memoryview slices of the pieces (the only copy; numpy's concatenate measured half as fast), or,
given an `allocate` (a DataLoader worker's shared memory, `corgi_io.loaders.fast_batches`), copied
into the buffer it gives.  Before the first `bytes` batch, `warm_batch_memory` lets malloc keep
batch-sized memory, so that a batch's buffer does not fault in fresh pages (`buffers.py`).

Same samples, same order as `buffer_order` and `collated_batches`: a buffer's order is known at
its marker, its ids are queued after the previous buffers', and every run of `batch_size` queued
ids is one batch, the last one shorter.  An id may be listed before its piece leaves, or twice
(padding): each row counts its listings still due (`due`), one per read of it, so a row read
twice is kept once and gathered twice, as the per-sample path yields a repeat as a copy.

Memory: a piece stays while a row of it is due.  After each buffer's batches, rows no longer due
are dropped, and the due rows of pieces less than half due (carried batch remainders, window
mode's resident samples) are copied into one new buffer, so a few lingering samples never pin
whole pieces: what is held stays within the per-sample path's bound plus half again.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from corgi_io.reading.buffers import warm_batch_memory
from corgi_io.reading.read_ahead import Marker, read_ahead
from corgi_io.timing.clock import NULL_CLOCK
from corgi_io.timing.stages import stage_index

COLLATE = stage_index("collate")

_ORDER = ("index", "key", "label", "size", "kind", "ext")  # the sample dict's fields before `data`


class PieceRows(NamedTuple):
    """One piece read for batches: its first id, its bytes (verified), its samples' columns (`columns`), and what
    to call with `data` once none of it is needed (a `BufferPool`'s `give`), if anything."""

    first: int
    data: bytes
    columns: dict
    release: object = None


class RowBatch(NamedTuple):
    """A batch of raw samples: the payloads joined (`buffer`: `bytes`, or what `allocate` gave, with `offsets`, len
    + 1 of them) and the other fields as columns, in the sample dict's order (`index`, `key`, `label`, `size`,
    `kind`, `ext`, then `source`)."""

    buffer: object
    offsets: np.ndarray
    columns: dict


def ordered_batches(plan, read, nbytes, residency, batch_size: int, *, ahead: int, threads: int, allocate=None,
                    clock=NULL_CLOCK):
    """The `RowBatch`es of a buffer plan, every `batch_size` ids of its orders in turn (the last batch shorter):
    each piece read by `read(piece)` (-> `PieceRows`) on `threads` threads, at most `ahead` pieces ahead;
    `nbytes(piece)` is what a read commits, counted in `residency`.  `allocate(n)` -> (buffer, writable
    memoryview of its n bytes), if given, makes each batch's buffer (the payloads are copied into the view);
    by default a batch's buffer is `bytes`.  `clock` times the wait for reads and each batch's gathering
    (``collate``)."""
    steps = (step for pieces, order in plan for step in (*map(tuple, pieces.tolist()), Marker(order)))
    pieces = read_ahead(steps, read, ahead=ahead, threads=threads,
                        on_submit=lambda piece: residency.hold(nbytes(piece)), clock=clock)
    if allocate is None:
        warm_batch_memory()  # each batch's bytes from memory malloc keeps, not fresh pages
    rows, queue = ResidentRows(residency, allocate), np.empty(0, dtype=np.int64)
    try:
        for item in pieces:
            if not isinstance(item, Marker):
                rows.add(item)
                continue
            rows.flush()
            queue = np.concatenate([queue, np.asarray(item.value, dtype=np.int64)])
            cut = len(queue) - len(queue) % batch_size
            for at in range(0, cut, batch_size):
                yield _collated(rows, queue[at:at + batch_size], clock)
            queue = queue[cut:]
            rows.compact()
        if len(queue):
            yield _collated(rows, queue, clock)
    finally:
        pieces.close()  # stop the reading threads now, not when the chain is collected


def _collated(rows, ids: np.ndarray, clock) -> RowBatch:
    """`rows.take(ids)`, timed as ``collate``."""
    left = clock.switch(COLLATE)
    batch = rows.take(ids)
    clock.switch(left)
    clock.count(COLLATE, len(batch.buffer), len(ids))
    return batch


class ResidentRows:
    """The rows of the pieces read and not yet all batched, sorted by id, over the pieces' bytes (see the module)."""

    def __init__(self, residency, allocate=None):
        self.residency, self.allocate = residency, allocate  # allocate: see `ordered_batches`
        self.table = None     # column name -> array, one row per resident id, sorted by "id"
        self.pending = []     # rows of the pieces that arrived since the last `flush`
        self.views = {}       # piece number -> memoryview of its bytes
        self.owners = {}      # piece number -> (its release or None, its data), for when it leaves
        self.pieces = 0       # pieces numbered so far

    def add(self, piece: PieceRows) -> None:
        """A piece read: its rows wait for the next `flush`, its bytes stay whole."""
        n, number = len(piece.columns["begin"]), self.pieces
        self.pieces += 1
        self.views[number], self.owners[number] = memoryview(piece.data), (piece.release, piece.data)
        self.residency.split(len(piece.data), len(piece.data))  # held whole until its rows are batched
        self.pending.append({**piece.columns, "id": np.arange(piece.first, piece.first + n, dtype=np.int64),
                             "piece": np.full(n, number, dtype=np.int64), "due": np.ones(n, dtype=np.int64)})

    def flush(self) -> None:
        """Merge the new rows into the table, sorted by id; a row read again is kept once, its listings added up."""
        if not self.pending:
            return
        parts = ([] if self.table is None else [self.table]) + self.pending
        table = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        order = np.argsort(table["id"], kind="stable")  # the first copy of an id first
        table = {name: column[order] for name, column in table.items()}
        ids = table["id"]
        first = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        if len(first) < len(ids):
            due = np.add.reduceat(table["due"], first)
            table = {name: column[first] for name, column in table.items()}
            table["due"] = due
        self.table, self.pending = table, []

    def take(self, ids: np.ndarray) -> RowBatch:
        """The batch of `ids`, in their order; each row gathered is due once less.  KeyError for an id not due
        (a broken plan)."""
        t = self.table
        at = np.searchsorted(t["id"], ids).clip(max=len(t["id"]) - 1)
        np.subtract.at(t["due"], at, 1)
        if not np.array_equal(t["id"][at], ids) or (t["due"][at] < 0).any():
            raise KeyError(f"the buffer plan lists samples that were not read for it: {ids[:8].tolist()}...")
        pieces, begins, ends = t["piece"][at], t["begin"][at], t["end"][at]
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(ends - begins, out=offsets[1:])
        return RowBatch(self._gather(pieces, begins, ends, offsets), offsets,
                        {name: t[name][at] for name in (*_ORDER, "source") if name in t})

    def _gather(self, pieces, begins, ends, offsets):
        """The payloads `begins[i]:ends[i]` of pieces `pieces[i]` back to back: one `bytes.join`, or copied into
        the view of a buffer from `allocate` (at `offsets`)."""
        views = self.views
        parts = [views[p][a:z] for p, a, z in zip(pieces.tolist(), begins.tolist(), ends.tolist())]
        if self.allocate is None:
            return b"".join(parts)
        buffer, view = self.allocate(int(offsets[-1]))
        for part, a, z in zip(parts, offsets[:-1].tolist(), offsets[1:].tolist()):
            view[a:z] = part
        return buffer

    def compact(self) -> None:
        """Drop the rows no longer due and the pieces with none; copy the due rows of pieces less than half due into
        one buffer of their own (see the module).  Call it after `flush`, with no piece pending."""
        t = {name: column[self.table["due"] > 0] for name, column in self.table.items()}
        numbers, inverse = np.unique(t["piece"], return_inverse=True)
        due_bytes = np.bincount(inverse, weights=t["end"] - t["begin"], minlength=len(numbers))
        sizes = np.array([len(self.views[p]) for p in numbers.tolist()], dtype=np.int64)
        sparse = numbers[due_bytes * 2 < sizes]
        freed = sum(self._drop(p) for p in set(self.views) - set(numbers.tolist()))
        if len(sparse):
            freed -= self._gather_into_one(t, np.isin(t["piece"], sparse))
            freed += sum(self._drop(p) for p in sparse.tolist())
        self.residency.release(freed)
        self.table = t

    def _drop(self, number: int) -> int:
        """Forget a piece (its buffer goes back where it came from); returns its bytes."""
        release, data = self.owners.pop(number)
        nbytes = len(self.views.pop(number))
        if release is not None:
            release(data)
        return nbytes

    def _gather_into_one(self, t: dict, move: np.ndarray) -> int:
        """Copy the payloads of the rows `move` of table `t` into one new piece, and point those rows at it;
        returns its bytes."""
        begins, ends, pieces = t["begin"][move], t["end"][move], t["piece"][move]
        views = self.views
        data = b"".join([views[p][a:z] for p, a, z in zip(pieces.tolist(), begins.tolist(), ends.tolist())])
        lengths = ends - begins
        t["begin"][move] = np.cumsum(lengths) - lengths
        t["end"][move] = t["begin"][move] + lengths
        t["piece"][move] = self.pieces
        self.views[self.pieces], self.owners[self.pieces] = memoryview(data), (None, data)
        self.pieces += 1
        return len(data)

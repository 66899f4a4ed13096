"""Sequence packing in the loader: `CorgiPileDataset(batching=TokenRows(L))` yields rows of exactly L tokens.

The plan is `corgi_io.schedule.token_rows` (pure); here a worker reads the pieces of the buffers that
overlap its rows (one ranged read each, verified, `prefetch_blocks` ahead) as token ids, one array
per buffer (`corgi_io.loaders.token_pieces`), and the rows are built a chunk of about `CHUNK_SLOTS`
slots at a time (`RowBuilder`): per buffer and chunk
one `np.take` writes the chunk's int64 ids, end tokens and padding, and the runs of documents give
its document ids, positions and sequence bounds; items are views of their chunk.  No per-document
or per-token Python.  Each item is a dict of tensors: `input_ids`,
`position_ids` (restarting at 0 at each piece of a document and each run of padding),
`document_ids` (the document's sample index in the pack; -1 for padding), all (L,) int64 or (B, L)
with `TokenRows(batch_size=B)`, `cu_seqlens` (int32, the sequence boundaries over the item's flattened tokens,
0 first and B*L last, as flash-attn's varlen functions take them) and `max_seqlen` (an int).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch

from corgi_io.errors import ArgumentError
from corgi_io.reading.read_ahead import Marker, read_ahead

from corgi_io.loaders.options import TokenRows
from corgi_io.loaders.token_pieces import TokenPieces, buffer_steps, buffer_tokens

CHUNK_SLOTS = 1 << 18  # slots (token ids) of the rows built at once: 2 MiB an int64 column


def check_token_pack(manifest) -> None:
    """ArgumentError unless every sample's primary field is a .npy array (``corgi pack --tokenizer``: tokens.npy)."""
    if not manifest.extensions or not all(ext.endswith("npy") for ext in manifest.extensions):
        raise ArgumentError(f"TokenRows packs the token ids of the primary field, a .npy array (corgi pack "
                            f"--tokenizer writes tokens.npy); this pack's primary fields are {manifest.extensions}")


def row_steps(reader, stream, ranges: list, length: int):
    """A worker's read steps: per row range a marker, then per buffer overlapping it the pieces it needs
    (`buffer_steps`) and a marker naming the buffer's documents (`RankStream.buffers`), then the range's end."""
    for a, b in ranges:
        yield Marker(("range", a * length, b * length))
        for pieces, first, stop in stream.buffers(a * length, b * length):
            yield from buffer_steps(reader, list(map(tuple, pieces.tolist())))
            yield Marker(("buffer", first, stop))
        yield Marker(("end",))


@functools.lru_cache(maxsize=4)
def slot_range(n: int) -> np.ndarray:
    """``np.arange(n)`` (int64), made once per size (a chunk's slots) and read-only: the slot offsets the row
    passes add."""
    out = np.arange(n, dtype=np.int64)
    out.flags.writeable = False
    return out


class Chunk(NamedTuple):
    """Rows built at once, each (rows, L): token ids, document ids (-1: padding), positions (restarting at each
    sequence); and the sequences' `bounds` over the flattened slots (each one's first slot, then the end)."""

    tokens: np.ndarray
    docs: np.ndarray
    positions: np.ndarray
    bounds: np.ndarray


def sequences(starts: np.ndarray, ids: np.ndarray, n: int, length: int) -> tuple:
    """(bounds, ids) of the sequences over `n` slots in rows of `length`, from runs of document `ids` starting at
    slots `starts` (in order, the first at 0; of runs starting at one slot the last holds it): a sequence starts
    where a row starts or the document changes; `bounds` are their first slots, then `n`.  O(runs + rows)."""
    candidates = np.union1d(starts[starts < n], np.arange(0, n, length))
    ids = ids[np.searchsorted(starts, candidates, "right") - 1]
    keep = np.ones(len(candidates), bool)
    keep[1:] = (ids[1:] != ids[:-1]) | (candidates[1:] % length == 0)
    return np.append(candidates[keep], n), ids[keep]


class RowBuilder:
    """Lays a rank stream's documents into the rows of a worker's row ranges, buffer after buffer, straight into
    the int64 token ids of the chunk being built (`rows` rows of L, `pad_id` where nothing lands), noting where
    each document's run and each run of padding starts, and hands out each chunk once its rows are complete
    (`_take`: document ids and positions from those runs).  Documents come in slot order, so each slot is written
    once: a document's, or padding up to the next one's (`_pad`).  Per buffer and chunk a handful of numpy
    passes over the chunk's slots; no per-document Python."""

    def __init__(self, stream, spec: TokenRows, rows: int):
        self.stream, self.spec, self.length, self.rows = stream, spec, spec.length, rows
        self.tail = [spec.pad_id if spec.eos_id is None else spec.eos_id, spec.pad_id]  # what `_fill` takes last
        self._new_chunk()

    def _new_chunk(self) -> None:
        self.filled = 0  # rows of the chunk complete
        self.tokens = np.empty(self.rows * self.length, np.int64)
        self.run_starts, self.run_ids = [np.zeros(1, np.int64)], [np.full(1, -1, np.int64)]  # runs, in slot order

    def start(self, lo: int, hi: int) -> None:
        """A row range begins: its slots [lo, hi)."""
        self.lo, self.hi, self.done = lo, hi, lo  # `done`: the slots written, up to there

    def _base(self) -> int:
        """Where slot 0 of the stream would lie in the chunk (slot `lo` is the start of row `filled`)."""
        return self.filled * self.length - self.lo

    def _at(self, a: int, z: int) -> slice:
        """Where slots [a, z) of the stream lie in the chunk."""
        return slice(self._base() + a, self._base() + z)

    def _pad(self, upto: int) -> None:
        """The slots not written yet, up to `upto`: padding (`pad_id`, document -1)."""
        if upto > self.done:
            self._runs(np.array([self.done]), np.array([-1]))
            self.tokens[self._at(self.done, upto)], self.done = self.spec.pad_id, upto

    def _runs(self, starts: np.ndarray, ids: np.ndarray) -> None:
        """Runs of document `ids` (-1: padding) from stream slots `starts` on, each up to the next run."""
        self.run_starts.append(starts + self._base())
        self.run_ids.append(ids)

    def _window(self) -> int:
        """The slot after the rows of the range that the chunk still has room for."""
        return min(self.lo + (self.rows - self.filled) * self.length, self.hi)

    def place(self, first: int, stop: int, pieces: list):
        """Documents ``first:stop`` of the stream (a buffer's, their ids in `pieces`) laid down; yields each chunk
        made complete (`_take`)."""
        s = self.stream
        tokens, offsets = buffer_tokens(pieces, s.ids[first:stop], self.tail)
        upto = min(int(s.starts[stop]) if stop < len(s.ids) else s.end, self.hi)  # nothing lands before the next
        while self.lo < self.hi:
            end = self._window()
            self._fill(slice(first, stop), tokens, offsets, end)
            if upto < end:
                return
            yield from self._advance(end)

    def _fill(self, docs: slice, tokens: np.ndarray, offsets: np.ndarray, end: int) -> None:
        """The slots [lo, end) where documents `docs` of the stream land (and the padding between them), written:
        one `take` from `tokens` (`buffer_tokens`: the end token and the padding id last) over three runs per
        document, its ids, its end token and the padding after it (indices past the end clip to the padding)."""
        s, lo = self.stream, self.lo
        starts, lengths = s.starts[docs], s.lengths[docs]
        a, z = np.searchsorted(starts + lengths, lo, "right"), np.searchsorted(starts, end, "left")
        if a >= z:
            return
        starts, lengths, ids, offsets = starts[a:z], lengths[a:z], s.ids[docs][a:z], offsets[a:z]
        stops = starts + lengths  # each document's ids, its end token, then the padding up to the next one's start
        eos = int(self.spec.eos_id is not None)
        bounds = np.column_stack([starts, stops - eos, stops, np.append(starts[1:], stops[-1])]).clip(lo, end)
        first, last = int(bounds[0, 0]), int(bounds[-1, 3])
        runs = np.diff(bounds).ravel()
        self._pad(first)
        at = self._at(first, last)
        self._runs(bounds[:, [0, 2]].ravel(), np.column_stack([ids, np.full(len(ids), -1)]).ravel())
        bases = np.column_stack([offsets - starts, len(tokens) - 2 - bounds[:, 1], len(tokens) - 1 - bounds[:, 2]])
        sources = np.repeat(bases.ravel() + first, runs)
        sources += slot_range(self.rows * self.length)[:last - first]
        self.tokens[at] = np.take(tokens, sources, mode="clip")
        self.done = last

    def _advance(self, end: int):
        """The rows up to slot `end` complete (padding where nothing landed): yields the chunk when it is full."""
        self._pad(end)
        self.filled += (end - self.lo) // self.length
        self.lo = end
        if self.filled == self.rows:
            yield self._take()

    def _take(self) -> Chunk:
        """The chunk's complete rows, the next chunk begun."""
        n = self.filled * self.length
        bounds, ids = sequences(np.concatenate(self.run_starts), np.concatenate(self.run_ids), n, self.length)
        sizes = np.diff(bounds)
        positions = np.repeat(bounds[:-1], sizes)
        np.subtract(slot_range(self.rows * self.length)[:n], positions, out=positions)
        shape = self.filled, self.length
        chunk = Chunk(self.tokens[:n].reshape(shape), np.repeat(ids, sizes).reshape(shape), positions.reshape(shape),
                      bounds)
        self._new_chunk()
        return chunk

    def finish(self):
        """The range's remaining rows complete (padding where no document lands): yields the chunks they fill."""
        while self.lo < self.hi:
            yield from self._advance(self._window())

    def flush(self):
        """Yields the last chunk, shorter, when rows are left in it."""
        if self.filled:
            yield self._take()


def row_blocks(reader, stream, ranges: list, spec: TokenRows, rows: int):
    """A worker's rows in `Chunk`s of `rows` (the last one may be shorter), in order: the pieces read `prefetch`
    ahead by `reader` (a PieceReader), as `PieceTokens`."""
    builder, pieces = RowBuilder(stream, spec, rows), []
    steps = row_steps(reader, stream, ranges, spec.length)
    items = read_ahead(steps, TokenPieces(reader).read, ahead=reader.prefetch_pieces, threads=reader.read_threads)
    try:
        for item in items:
            if not isinstance(item, Marker):
                pieces.append(item)
            elif item.value[0] == "range":
                builder.start(*item.value[1:])
            elif item.value[0] == "buffer":
                yield from builder.place(*item.value[1:], pieces)
                pieces = []
            else:
                yield from builder.finish()
        yield from builder.flush()
    finally:
        items.close()


def chunk_rows(batch: int, length: int, rows: int) -> int:
    """Rows built at once: whole items of `batch` rows, about `CHUNK_SLOTS` slots (at least one item), so that
    the numpy passes of `RowBuilder` and `chunk_items` run over arrays that stay in cache, a few per chunk; and
    never more items than the worker's `rows` fill (a chunk's arrays are as long as it is, whatever CHUNK_SLOTS
    says: sized by CHUNK_SLOTS alone, a chunk of 2^30 slots took 8 GiB for a few hundred rows)."""
    items = max(1, min(CHUNK_SLOTS // (batch * length), -(-rows // batch)))
    return batch * items


def chunk_items(chunk: Chunk, batch: int, batched: bool):
    """The items of a `Chunk`, `batch` rows each (the last may be shorter), as dicts of tensors viewing the
    chunk's; `cu_seqlens` are an item's sequence starts over its flattened tokens, and their end."""
    n, length = chunk.tokens.shape
    edges = np.arange(0, n, batch) * length  # each item's first slot: a sequence's, as it starts a row
    firsts = np.append(np.searchsorted(chunk.bounds, edges), len(chunk.bounds) - 1)
    longest = np.maximum.reduceat(np.diff(chunk.bounds), firsts[:-1]).tolist()
    columns = [torch.from_numpy(array) for array in (chunk.tokens, chunk.positions, chunk.docs)]
    for k, edge in enumerate(edges.tolist()):
        row = k * batch
        ids, pos, doc = (column[row:row + batch] if batched else column[row] for column in columns)
        cu = torch.from_numpy((chunk.bounds[firsts[k]:firsts[k + 1] + 1] - edge).astype(np.int32))
        yield {"input_ids": ids, "position_ids": pos, "document_ids": doc, "cu_seqlens": cu, "max_seqlen": longest[k]}


def row_items(reader, stream, ranges: list, spec: TokenRows, batch_size: int | None):
    """A worker's items: rows one by one, or batches of `batch_size` rows (see the module)."""
    batch = batch_size or 1
    rows = chunk_rows(batch, spec.length, sum(b - a for a, b in ranges))
    for chunk in row_blocks(reader, stream, ranges, spec, rows):
        yield from chunk_items(chunk, batch, batch_size is not None)

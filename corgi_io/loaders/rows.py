"""Sequence packing in the loader: `CorgiPileDataset(pack_length=L)` yields rows of exactly L tokens.

The plan is `corgi_io.schedule.rows` (pure); here a worker reads the pieces of the buffers that
overlap its rows (one ranged read each, verified, `prefetch_blocks` ahead), takes each document's
token ids straight out of the piece's bytes (the ``.npy`` header parsed once per piece, the ids
viewed, not copied, until the row is built) and lays the documents into rows with numpy: one
concatenation per buffer, no per-token Python.  Each item is a dict of tensors: `input_ids`,
`position_ids` (restarting at 0 at each piece of a document and each run of padding),
`document_ids` (the document's sample index in the pack; -1 for padding), all (L,) int64 or (B, L)
with `batch_size=B`, `cu_seqlens` (int32, the sequence boundaries over the item's flattened tokens,
0 first and B*L last, as flash-attn's varlen functions take them) and `max_seqlen` (an int).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np
import torch

from corgi_io.arguments import check_at_least, check_flag
from corgi_io.errors import ArgumentError, CorruptDataError, DecodeError
from corgi_io.reading.read_ahead import Marker, read_ahead
from corgi_io.schedule.rows import RowOptions, RowPlanner

from corgi_io.loaders.decode import token_ids
from corgi_io.loaders.progress import Progress

NPY_V1 = np.frombuffer(b"\x93NUMPY\x01\x00", np.uint8)  # the magic and version 1.0 of a .npy file
ROW_SHUFFLES = ("corgipile", "block", "none")


@dataclass(frozen=True)
class RowSpec:
    """The sequence-packing options of a dataset, checked (see `CorgiPileDataset`)."""

    pack_length: int
    eos_id: int | None
    split_documents: bool
    pad_id: int

    @property
    def options(self) -> RowOptions:
        return RowOptions(self.pack_length, self.eos_id is not None, self.split_documents)

    def identity(self) -> dict:
        """What a resume state must agree on, besides the loader's options."""
        return {"pack_length": self.pack_length, "eos_id": self.eos_id, "split_documents": self.split_documents}


def row_spec(pack_length, eos_id, split_documents, pad_id, decode) -> RowSpec | None:
    """The checked options, or None without `pack_length` (then the others must keep their defaults)."""
    split_documents = check_flag("split_documents", split_documents)
    if pack_length is None:
        if eos_id is not None or pad_id != 0 or not split_documents:
            raise ArgumentError("eos_id=, pad_id= and split_documents= shape the rows of pack_length=: give it too")
        return None
    if decode not in (None, "tokens"):
        raise ArgumentError(f"pack_length= reads the token ids of a .npy field itself: decode must be None or "
                            f"'tokens', got {decode!r}")
    return RowSpec(check_at_least("pack_length", pack_length, 1, optional=False),
                   check_at_least("eos_id", eos_id, 0, optional=True), split_documents,
                   check_at_least("pad_id", pad_id, 0, optional=False))


def check_row_options(options: dict) -> None:
    """ArgumentError for the loader options that rows of pack_length= do not take (`check_options` calls it)."""
    refused = [name for name, bad in (("transform", options["transform"] is not None),
                                      ("group_by_size", options["group_by_size"]),
                                      ("drop_last", options["drop_last"]),
                                      ("partitions", options["partitions"] is not None),
                                      ("cache_dir", options["cache_dir"] is not None),
                                      ("on_error", options["on_error"] != "raise"),
                                      ("balance", options["balance"] not in ("count", "size")),
                                      ("shuffle", options["shuffle"] not in ROW_SHUFFLES)) if bad]
    if refused:
        raise ArgumentError(f"pack_length= packs token rows: it does not take {', '.join(f'{n}=' for n in refused)} "
                            f"(it takes shuffle in {ROW_SHUFFLES}, balance 'count' or 'size', and no transform, "
                            "group_by_size, drop_last, partitions, cache_dir or on_error='skip')")


def check_token_pack(manifest) -> None:
    """ArgumentError unless every sample's primary field is a .npy array (``corgi pack --tokenizer``: tokens.npy)."""
    if not manifest.extensions or not all(ext.endswith("npy") for ext in manifest.extensions):
        raise ArgumentError(f"pack_length= packs the token ids of the primary field, a .npy array (corgi pack "
                            f"--tokenizer writes tokens.npy); this pack's primary fields are {manifest.extensions}")


class RowProgress(Progress):
    """A worker's progress counted in rows, resumed by the row plan's arithmetic."""

    resumer = staticmethod(RowPlanner.resumed_plan)


class TokenPieces:
    """`read(piece)`: one piece of a pack read (and verified) by a `PieceReader`, as {sample id: its token ids}."""

    def __init__(self, reader):
        self.reader, self.manifest = reader, reader.manifest

    def read(self, piece) -> dict:
        data = self.reader.read_piece(piece)
        _, start, stop = piece
        s = self.manifest.samples
        begins = np.asarray(s.data_offset[start:stop] - s.offset[start], np.int64)
        nbytes = np.asarray(s.bytes[start:stop], np.int64)
        counts = np.asarray(s.size[start:stop], np.int64)
        fast = npy_layout(data, begins, nbytes)
        ids = {}
        for i, (begin, n, count) in enumerate(zip(begins.tolist(), nbytes.tolist(), counts.tolist())):
            if fast is not None and fast[1][i]:
                dtype, skip = fast[0], fast[2][i]
                if n - skip != count * dtype.itemsize:
                    self._corrupt(start + i, f"{(n - skip) / dtype.itemsize:g} token ids, the manifest says {count}")
                ids[start + i] = np.frombuffer(data, dtype, count, begin + skip)
            else:
                ids[start + i] = self._slow(data[begin:begin + n], start + i, count)
        return ids

    def _slow(self, payload: bytes, index: int, count: int) -> np.ndarray:
        """One document through `token_ids` (np.load, no pickle): a header the fast path does not read."""
        key = self.manifest.keys(index, index + 1)[0]
        try:
            ids = token_ids(payload, {"key": key}).numpy()
        except DecodeError as exc:
            shard, offset = self._where(index)
            raise DecodeError(f"{shard}: byte offset {offset}: {exc}", shard=shard, offset=offset, key=key) from None
        if len(ids) != count:
            self._corrupt(index, f"{len(ids)} token ids, the manifest says {count}")
        return ids

    def _where(self, index: int) -> tuple:
        s = self.manifest.samples
        return self.manifest.shards[int(s.shard[index])].path, int(s.data_offset[index])

    def _corrupt(self, index: int, what: str):
        shard, offset = self._where(index)
        key = self.manifest.keys(index, index + 1)[0]
        raise CorruptDataError(f"{shard}: byte offset {offset}: sample {key!r} holds {what}", shard=shard,
                               offset=offset, key=key)


def npy_layout(data: bytes, begins: np.ndarray, nbytes: np.ndarray):
    """(dtype, per payload whether it is a .npy v1.0 array whose header matches the first one's up to the shape,
    per payload its header's bytes), the first payload's header parsed once and the others compared to it with
    numpy; None when the first is not a 1-D integer array (then every payload goes the slow way).  O(payloads)."""
    u8 = np.frombuffer(data, np.uint8)
    first = int(begins[0]) if len(begins) else 0
    if not len(begins) or nbytes[0] < 10 or not np.array_equal(u8[first:first + 8], NPY_V1):
        return None
    text = data[first + 10:first + 10 + int(u8[first + 8]) + 256 * int(u8[first + 9])]
    try:
        header = ast.literal_eval(text.decode("latin1"))
        dtype, shape = np.dtype(header["descr"]), header["shape"]
    except (ValueError, SyntaxError, TypeError, KeyError):
        return None
    if header.get("fortran_order") or len(shape) != 1 or dtype.kind not in "ui" or b"'shape': (" not in text:
        return None
    prefix = np.frombuffer(text[:text.index(b"'shape': (") + 10], np.uint8)
    room = nbytes >= 10 + len(prefix)
    at = np.where(room, begins, first)[:, None]  # a payload too short to hold the prefix is not read past its end
    same = room & np.all(u8[at + np.arange(8)] == NPY_V1, axis=1) & \
        np.all(u8[at + 10 + np.arange(len(prefix))] == prefix, axis=1)
    skips = 10 + u8[at[:, 0] + 8].astype(np.int64) + 256 * u8[at[:, 0] + 9].astype(np.int64)
    return dtype, (same & (skips <= nbytes)).tolist(), skips.tolist()


def row_steps(stream, ranges: list, length: int):
    """A worker's read steps: per row range a marker, then per buffer overlapping it the pieces it needs and a
    marker naming the buffer's documents (`RankStream.buffers`), then the range's end."""
    for a, b in ranges:
        yield Marker(("range", a * length, b * length))
        for pieces, first, stop in stream.buffers(a * length, b * length):
            yield from map(tuple, pieces.tolist())
            yield Marker(("buffer", first, stop))
        yield Marker(("end",))


class RowBuilder:
    """Lays a rank stream's documents into the slots [lo, hi) of one row range, buffer after buffer, and hands
    out each row once nothing more can land in it.  Holds the rows not yet complete (a partial row, or the
    rows a buffer's documents reach): slots as int64 token ids (`pad_id` where nothing lands) and document
    ids (-1)."""

    def __init__(self, stream, spec: RowSpec):
        self.stream, self.spec, self.length = stream, spec, spec.pack_length
        self.eos = None if spec.eos_id is None else np.array([spec.eos_id], np.int64)

    def start(self, lo: int, hi: int) -> None:
        self.base, self.hi = lo, hi
        self.tokens, self.docs = np.zeros(0, np.int64), np.zeros(0, np.int64)

    def place(self, first: int, stop: int, held: dict) -> tuple:
        """Documents ``first:stop`` of the stream (their ids in `held`, taken out) laid down; the complete rows
        (tokens, document ids), each (n, L).  O(their tokens) with numpy, O(documents) in Python."""
        s = self.stream
        ids, starts, lengths = s.ids[first:stop], s.starts[first:stop], s.lengths[first:stop]
        gaps = np.append(starts[1:] - starts[:-1] - lengths[:-1], 0).tolist()  # padding between unsplit documents
        parts = []
        for doc, gap in zip(ids.tolist(), gaps):
            parts.append(held.pop(doc))
            if self.eos is not None:
                parts.append(self.eos)
            if gap:
                parts.append(np.full(gap, self.spec.pad_id, np.int64))
        lo, tokens = int(starts[0]), np.concatenate(parts)
        docs = np.repeat(np.column_stack([ids, np.full(len(ids), -1)]).ravel(),
                         np.column_stack([lengths, gaps]).ravel())
        self._put(lo, tokens, docs)
        upto = int(s.starts[stop]) if stop < len(s.ids) else s.end  # nothing lands before the next document
        return self._take((min(upto, self.hi) - self.base) // self.length)

    def _put(self, lo: int, tokens: np.ndarray, docs: np.ndarray) -> None:
        """Slots [lo, lo + len(tokens)) clipped to [base, hi), growing the held rows to reach them."""
        a, z = max(lo, self.base), min(lo + len(tokens), self.hi)
        if a >= z:
            return
        self._grow(z)
        self.tokens[a - self.base:z - self.base] = tokens[a - lo:z - lo]
        self.docs[a - self.base:z - self.base] = docs[a - lo:z - lo]

    def _grow(self, slot: int) -> None:
        """The held rows extended (with padding) to the row that holds slot `slot - 1`."""
        need = -(-(slot - self.base) // self.length) * self.length
        if need > len(self.tokens):
            self.tokens = np.concatenate([self.tokens, np.full(need - len(self.tokens), self.spec.pad_id, np.int64)])
            self.docs = np.concatenate([self.docs, np.full(need - len(self.docs), -1, np.int64)])

    def finish(self) -> tuple:
        """The range's remaining rows, up to its end (padding where no document lands)."""
        self._grow(self.hi)
        return self._take((self.hi - self.base) // self.length)

    def _take(self, rows: int) -> tuple:
        cut = rows * self.length
        out = self.tokens[:cut].reshape(rows, self.length), self.docs[:cut].reshape(rows, self.length)
        self.tokens, self.docs, self.base = self.tokens[cut:], self.docs[cut:], self.base + cut
        return out


def row_blocks(reader, stream, ranges: list, spec: RowSpec):
    """A worker's complete rows, (tokens, document ids) blocks of (n, L), in order: the pieces read `prefetch`
    ahead by `reader` (a PieceReader), each document's ids taken out of its piece (`TokenPieces`)."""
    builder, held = RowBuilder(stream, spec), {}
    steps = row_steps(stream, ranges, spec.pack_length)
    items = read_ahead(steps, TokenPieces(reader).read, ahead=reader.prefetch_pieces, threads=reader.read_threads)
    try:
        for item in items:
            if not isinstance(item, Marker):
                held.update(item)
            elif item.value[0] == "range":
                builder.start(*item.value[1:])
            elif item.value[0] == "buffer":
                yield builder.place(*item.value[1:], held)
            else:
                yield builder.finish()
                held.clear()
    finally:
        items.close()


def batches_of(blocks, batch: int):
    """Blocks of rows regrouped into (batch, L) blocks, the last one shorter when the rows run out."""
    tokens, docs, count = [], [], 0
    for block_tokens, block_docs in blocks:
        tokens.append(block_tokens)
        docs.append(block_docs)
        count += len(block_tokens)
        if count >= batch:
            all_tokens, all_docs = np.concatenate(tokens), np.concatenate(docs)
            whole = count - count % batch
            for i in range(0, whole, batch):
                yield all_tokens[i:i + batch], all_docs[i:i + batch]
            tokens, docs, count = [all_tokens[whole:]], [all_docs[whole:]], count - whole
    if count:
        yield np.concatenate(tokens), np.concatenate(docs)


def row_item(tokens: np.ndarray, docs: np.ndarray, batched: bool) -> dict:
    """The dict of one item from (n, L) token and document ids: positions restart at 0 where a row starts or
    the document changes; `cu_seqlens` are those restarts over the n * L flattened tokens, and their end."""
    n, length = tokens.shape
    flat = docs.ravel()
    restart = np.zeros(n * length, bool)
    restart[::length] = True
    restart[1:] |= flat[1:] != flat[:-1]
    bounds = np.append(np.flatnonzero(restart), n * length)
    positions = np.arange(n * length) - np.repeat(bounds[:-1], np.diff(bounds))
    item = {"input_ids": torch.from_numpy(np.ascontiguousarray(tokens)),
            "position_ids": torch.from_numpy(positions.reshape(n, length)),
            "document_ids": torch.from_numpy(np.ascontiguousarray(docs)),
            "cu_seqlens": torch.from_numpy(bounds.astype(np.int32)), "max_seqlen": int(np.diff(bounds).max())}
    if not batched:
        item.update((name, item[name][0]) for name in ("input_ids", "position_ids", "document_ids"))
    return item


def row_items(reader, stream, ranges: list, spec: RowSpec, batch_size: int | None):
    """A worker's items: rows one by one, or batches of `batch_size` rows (see the module)."""
    blocks = row_blocks(reader, stream, ranges, spec)
    for tokens, docs in batches_of(blocks, batch_size or 1):
        yield row_item(tokens, docs, batch_size is not None)

"""A buffer's pieces read as token ids, for sequence packing (`corgi_io.loaders.token_rows`).

`TokenPieces.read` views each piece's bytes as the ids of its documents' ``tokens.npy`` payloads,
their headers checked with numpy against the first one's, parsed once per piece (`npy_layout`); a
payload of another layout is copied through `token_ids` (np.load with allow_pickle=False).  On
local storage a buffer's pieces are read into one array (`buffer_steps`), which `buffer_tokens` then
views with the end token and the padding id in its tail (`shared_tokens`); elsewhere the pieces are
joined into one (`joined_tokens`).  A payload whose ids do not match its manifest size is a
CorruptDataError naming shard, offset and key.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from corgi_io.errors import CorruptDataError, DecodeError

from corgi_io.loaders.decode import token_ids

NPY_V1 = np.frombuffer(b"\x93NUMPY\x01\x00", np.uint8)  # the magic and version 1.0 of a .npy file
# numpy's header of a 1-D integer array in C order, read without ast: ast.literal_eval in reading threads can fail
# with "SystemError: AST constructor recursion depth mismatch" on CPython before 3.11.8 (gh-106905)
_NPY_1D_HEADER = re.compile(rb"\{'descr': '([<>|=]?[iu][1248])', 'fortran_order': False, 'shape': \(\d+,\), \} *\n")
TAIL_BYTES = 16  # after a buffer's pieces in its array: room for the end token and the padding id of any dtype


class PieceStep(NamedTuple):
    """A piece to read, and where: into `sink`, one array for the pieces of its buffer, from byte `base` on
    (`buffer_steps`), or (no sink) into bytes of its own."""

    piece: tuple
    sink: np.ndarray | None = None
    base: int = 0


class PieceTokens(NamedTuple):
    """The token ids of one piece's documents: `tokens` (1-D, the ids' own dtype) and per document of the piece
    (samples ``first..first + len(offsets)``) the index of its first id in `tokens`; `step`: the `PieceStep`
    that read it when `tokens` views the piece's bytes in its buffer's array, else None."""

    first: int
    tokens: np.ndarray
    offsets: np.ndarray
    step: PieceStep | None = None


class TokenPieces:
    """`read(step)`: one piece of a pack read (and verified) by a `PieceReader`, as its `PieceTokens`."""

    def __init__(self, reader):
        self.reader, self.manifest = reader, reader.manifest

    def read(self, step: PieceStep) -> PieceTokens:
        """The piece's ids viewed in its bytes, not copied, when every document is a .npy array with the first
        one's header, aligned to its dtype (`npy_layout`); else the documents copied one by one (`_compact`)."""
        piece, sink, base = step
        if sink is None:
            data = self.reader.read_piece(piece)
        else:
            data = self.reader.read_piece(piece, into=memoryview(sink)[base:base + self.reader.byte_range(piece)[2]])
        _, start, stop = piece
        s = self.manifest.samples
        begins = np.asarray(s.data_offset[start:stop] - s.offset[start], np.int64)
        nbytes = np.asarray(s.bytes[start:stop], np.int64)
        counts = np.asarray(s.size[start:stop], np.int64)
        layout = npy_layout(data, begins, nbytes)
        if layout is not None:
            dtype, fast, skips = layout
            firsts = begins + skips
            if fast.all() and not (firsts % dtype.itemsize).any():
                self._check_counts(start, nbytes - skips, counts, dtype.itemsize)
                return PieceTokens(start, np.frombuffer(data, dtype, len(data) // dtype.itemsize),
                                   firsts // dtype.itemsize, None if sink is None else step)
        return self._compact(data, start, begins, nbytes, counts, layout)

    def _check_counts(self, start: int, payload: np.ndarray, counts: np.ndarray, itemsize: int) -> None:
        """CorruptDataError for the first document whose payload does not hold its manifest size of ids."""
        bad = np.flatnonzero(payload != counts * itemsize)
        if len(bad):
            i = int(bad[0])
            self._corrupt(start + i, f"{payload[i] / itemsize:g} token ids, the manifest says {counts[i]}")

    def _compact(self, data, start: int, begins, nbytes, counts, layout) -> PieceTokens:
        """The piece's documents copied into one array, one by one: the fast ones viewed with the first header's
        dtype (checked), the others through `_slow`."""
        parts = []
        for i, (begin, n, count) in enumerate(zip(begins.tolist(), nbytes.tolist(), counts.tolist())):
            if layout is not None and layout[1][i]:
                dtype, skip = layout[0], int(layout[2][i])
                self._check_counts(start + i, np.array([n - skip]), np.array([count]), dtype.itemsize)
                parts.append(np.frombuffer(data, dtype, count, begin + skip))
            else:
                parts.append(self._slow(bytes(data[begin:begin + n]), start + i, count))
        offsets = np.concatenate(([0], np.cumsum([len(part) for part in parts], dtype=np.int64)[:-1]))
        return PieceTokens(start, np.concatenate(parts) if parts else np.zeros(0, np.int64), offsets[:len(parts)])

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
    text = bytes(data[first + 10:first + 10 + int(u8[first + 8]) + 256 * int(u8[first + 9])])
    header = _NPY_1D_HEADER.fullmatch(text)
    if header is None:
        return None
    dtype = np.dtype(header[1].decode("ascii"))
    prefix = np.frombuffer(text[:text.index(b"'shape': (") + 10], np.uint8)
    room = nbytes >= 10 + len(prefix)
    at = np.where(room, begins, first)  # a payload too short to hold the prefix is not read past its end
    heads = np.lib.stride_tricks.sliding_window_view(u8, 10 + len(prefix))[at]  # each payload's first bytes
    same = room & np.all(heads[:, :8] == NPY_V1, axis=1) & np.all(heads[:, 10:] == prefix, axis=1)
    skips = 10 + heads[:, 8].astype(np.int64) + 256 * heads[:, 9].astype(np.int64)
    return dtype, same & (skips <= nbytes), skips


def buffer_steps(reader, pieces: list) -> list:
    """The `PieceStep`s of a buffer's pieces: read into one array, each from a multiple of 8 bytes on, `TAIL_BYTES`
    after the last (`shared_tokens`), when `reader` reads into memory (local storage, no cache); else plain."""
    if reader.cache is not None or not hasattr(reader.storage, "read_range_into"):
        return [PieceStep(piece) for piece in pieces]
    sizes = np.array([reader.byte_range(piece)[2] for piece in pieces], np.int64)
    bases = np.concatenate(([0], np.cumsum(-(-sizes // 8) * 8)))
    sink = np.empty(int(bases[-1]) + TAIL_BYTES, np.uint8)
    return [PieceStep(piece, sink, base) for piece, base in zip(pieces, bases.tolist())]


def buffer_tokens(pieces: list, ids: np.ndarray, tail: list) -> tuple:
    """(tokens, offsets): the `PieceTokens` of a buffer as one array, `tail` (the end token, then the padding id)
    its last elements (`shared_tokens`, else `joined_tokens`); and for each sample of `ids` the index of its first
    token there.  O(n log pieces) but for the join."""
    pieces = sorted(pieces, key=lambda piece: piece.first)
    firsts = np.array([piece.first for piece in pieces], np.int64)
    counts = np.array([len(piece.offsets) for piece in pieces], np.int64)
    tokens, bases = shared_tokens(pieces, tail) or joined_tokens(pieces, tail)
    offsets = np.concatenate([piece.offsets + base for piece, base in zip(pieces, bases)])
    which = np.searchsorted(firsts, ids, "right") - 1
    at = np.concatenate(([0], np.cumsum(counts)[:-1]))[which] + ids - firsts[which]
    return tokens, offsets[at]


def shared_tokens(pieces: list, tail: list):
    """(tokens, each piece's first index there) without a copy: the array the pieces were read into
    (`buffer_steps`) viewed in their dtype, `tail` written in its last elements; None unless every piece views
    that one array in one dtype that holds `tail`."""
    step, dtype = pieces[0].step, pieces[0].tokens.dtype
    if step is None or np.result_type(dtype, *map(np.min_scalar_type, tail)) != dtype or \
            any(p.step is None or p.step.sink is not step.sink or p.tokens.dtype != dtype for p in pieces):
        return None
    tokens = step.sink.view(dtype)
    tokens[-len(tail):] = tail
    return tokens, [piece.step.base // dtype.itemsize for piece in pieces]


def joined_tokens(pieces: list, tail: list) -> tuple:
    """(tokens, each piece's first index there): the pieces' ids copied into one array, then `tail`, in their
    dtype if it holds `tail`, else one that does.  O(tokens)."""
    dtype = np.result_type(*(piece.tokens.dtype for piece in pieces), *map(np.min_scalar_type, tail))
    tokens = np.concatenate([piece.tokens for piece in pieces] + [np.array(tail, dtype)], dtype=dtype)
    return tokens, np.cumsum([0] + [len(piece.tokens) for piece in pieces[:-1]]).tolist()

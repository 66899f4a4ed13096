"""A worker's whole epoch as a pure plan: which pieces to read, what to yield.

``buffer_plan`` yields ``(pieces, order)`` pairs. The loader reads ``pieces``
(one ranged read each), then yields the samples whose global ids are listed in
``order``, in that order. An id in ``order`` may belong to a piece read for an
earlier buffer (window mode, carried batch remainders, heavy samples held for
their slot), so the loader keeps read-but-not-yet-yielded samples, keyed by id,
until they are listed. An id may also occur twice in one worker's plan when
padding repeats it (rare: padding normally lands on another rank), so the
loader should count occurrences.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from corgi_io.arguments import choose
from corgi_io.errors import ArgumentError
from corgi_io.schedule.batches import BatchComposer, SizeGrouper
from corgi_io.schedule.modes import SHUFFLES
from corgi_io.schedule.epoch_order import BUFFER, FULL, WINDOW, epoch_rng
from corgi_io.schedule.pieces import piece_counts, piece_samples, positions


@dataclass(frozen=True)
class StreamArgs:
    """What a worker's stream is a function of, besides its pieces (see `buffer_plan`)."""

    buffer_pieces: int
    seed: int
    epoch: int
    rank: int
    worker: int
    window_samples: int | None
    sizes: np.ndarray | None
    batch_size: int | None
    group_by_size: bool = False
    piece_sums: Callable | None = None  # pieces -> each one's size sum, without reading every sample's size

    def rng(self, stream: int) -> np.random.Generator:
        """The generator of one of the streams (order.BUFFER, WINDOW, FULL) of this worker."""
        return epoch_rng(self.seed, self.epoch, stream, self.rank, self.worker)


def buffer_plan(pieces: np.ndarray, *, shuffle: str = "corgipile", buffer_pieces: int = 16,
                seed: int = 0, epoch: int = 0, rank: int = 0, worker: int = 0,
                window_samples: int | None = None, sizes: np.ndarray | None = None,
                batch_size: int | None = None, group_by_size: bool = False,
                piece_sums: Callable | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(pieces_to_read, sample_ids_to_yield)`` for one worker, in order.

    ``shuffle``:
      - ``"corgipile"``: groups of ``buffer_pieces`` pieces; each group's
        samples are permuted by a generator keyed by ``(seed, epoch, rank,
        worker, buffer index)``. With ``batch_size`` (and ``sizes``) each
        buffer is instead composed into size-balanced batches (``piece_sums``,
        pieces -> their size sums, spares reading every sample's size for the
        buffers' density: `BlockTable.sizes_of`); the remainder
        is carried into the next buffer, so consecutive groups of
        ``batch_size`` in the stream are exactly the composed batches. The
        buffers are then groups of pieces of even density (``even_buffers``),
        and a sample larger than a whole balanced batch is held for the next
        heavy slot, a batch index every rank shares (``batches.BatchComposer``).
        With ``group_by_size`` the batches are instead length-grouped: each
        buffer sorted by size and cut, the batch order shuffled
        (``batches.SizeGrouper``).
      - ``"block"`` and ``"none"``: the same groups, samples in piece order.
        (For "none", get natural order from ``assign_ranks(shuffle_blocks=False)``.)
      - ``"window"``: one piece per buffer, samples pushed in piece order into
        a sliding shuffle buffer of ``window_samples`` (as ``tf.data``'s
        ``shuffle``): once full, each push first emits a uniformly chosen
        resident sample into that slot's place; the rest drain at the end.
      - ``"full"``: a random permutation of the worker's samples, one sample
        (one read) per buffer.
    """
    pieces = np.asarray(pieces, dtype=np.int64).reshape(-1, 3)
    mode = choose("shuffle", shuffle, SHUFFLES)
    if batch_size is not None and (not mode.composes_batches or sizes is None or batch_size < 1):
        raise ArgumentError("balanced batches need shuffle='corgipile', sizes and batch_size >= 1")
    if buffer_pieces < 1:
        raise ArgumentError(f"buffer_pieces must be >= 1, got {buffer_pieces}")
    if group_by_size and batch_size is None:
        raise ArgumentError("group_by_size groups batches by size: it needs batch_size")
    args = StreamArgs(buffer_pieces, seed, epoch, rank, worker, window_samples, sizes, batch_size, group_by_size,
                      piece_sums)
    return mode.stream_function()(pieces, args)


def in_order_stream(pieces, args: StreamArgs):
    """"block" and "none": groups of `buffer_pieces` pieces, samples in piece order."""
    step = args.buffer_pieces
    return ((pieces[j:j + step], piece_samples(pieces[j:j + step])) for j in range(0, len(pieces), step))


def corgipile_stream(pieces, args: StreamArgs):
    """CorgiPile: each group of `buffer_pieces` pieces permuted (or composed into balanced batches)."""
    buffer_pieces, sizes, batch_size = args.buffer_pieces, args.sizes, args.batch_size
    key = (args.seed, args.epoch, BUFFER, args.rank, args.worker)
    starts = range(0, len(pieces), buffer_pieces)
    composer = None
    if batch_size and len(pieces):
        sums = piece_size_sums(pieces, args)
        composer = SizeGrouper(sizes, batch_size) if args.group_by_size else \
            BatchComposer(sizes, batch_size, batch_size * float(sums.sum() / (pieces[:, 2] - pieces[:, 1]).sum()))
        # buffers of even density, so that every buffer's batches can reach the target
        pieces = even_buffers(pieces, sums, buffer_pieces, epoch_rng(*key, len(starts)))
    for j, first in enumerate(starts):
        chunk = pieces[first:first + buffer_pieces]
        rng = epoch_rng(*key, j)
        order = rng.permutation(piece_samples(chunk))
        if composer:
            order = composer.compose(order, rng, last=first + buffer_pieces >= len(pieces))
        yield chunk, order


def piece_size_sums(pieces: np.ndarray, args: StreamArgs) -> np.ndarray:
    """Each piece's size sum: from `args.piece_sums` (a block table's sums: no per-sample size is read, which on a
    remote pack would fetch the rows of every block of the epoch before its first batch), else from `args.sizes`."""
    if args.piece_sums is not None:
        return np.asarray(args.piece_sums(pieces), dtype=np.int64)
    return np.add.reduceat(np.asarray(args.sizes[piece_samples(pieces)], dtype=np.int64), positions(pieces)[:-1])


def window_stream(pieces, args: StreamArgs):
    """The tf.data/webdataset baseline: a sliding shuffle buffer of `window_samples` over the pieces."""
    if not args.window_samples or args.window_samples < 1:
        raise ArgumentError("shuffle='window' needs window_samples >= 1")
    return _sliding(pieces, args.window_samples, args.rng(WINDOW))


def _sliding(pieces, capacity, rng):
    buf: list[int] = []
    for j, (blk, a, z) in enumerate(pieces.tolist()):
        out = []
        for x, u in zip(range(a, z), rng.random(z - a).tolist()):
            if len(buf) < capacity:
                buf.append(x)
            else:
                i = int(u * capacity)
                out.append(buf[i])
                buf[i] = x
        if j == len(pieces) - 1:
            for u in rng.random(len(buf)).tolist():
                i = int(u * len(buf))
                out.append(buf[i])
                buf[i] = buf[-1]
                buf.pop()
        yield pieces[j:j + 1], np.array(out, dtype=np.int64)


def full_stream(pieces, args: StreamArgs):
    """One sample (one read) per buffer, in a random permutation of the worker's samples."""
    rng = args.rng(FULL)
    ids = piece_samples(pieces)
    blocks = np.repeat(pieces[:, 0], pieces[:, 2] - pieces[:, 1])
    for j in rng.permutation(len(ids)).tolist():
        yield np.array([[blocks[j], ids[j], ids[j] + 1]], np.int64), ids[j:j + 1]


def even_buffers(pieces: np.ndarray, piece_sizes: np.ndarray, buffer_pieces: int,
                 rng: np.random.Generator) -> np.ndarray:
    """``pieces`` (with their size sums) regrouped so that every run of ``buffer_pieces`` (a buffer) has
    about the size per sample of the whole: each piece's excess ``size - density * count``, largest
    first (ties in random order), goes to the group with room whose excess so far most offsets it.
    Groups keep their pieces in read order and come in the order of their first piece; the short
    group stays last. O(P * P / buffer_pieces)."""
    if len(pieces) <= buffer_pieces:
        return pieces
    counts = piece_counts(pieces)
    excess = piece_sizes - counts * (piece_sizes.sum() / counts.sum())
    groups = -(-len(pieces) // buffer_pieces)
    room = np.full(groups, buffer_pieces)
    room[-1] = len(pieces) - buffer_pieces * (groups - 1)  # the short group, kept last
    owner, sums = np.empty(len(pieces), np.int64), np.zeros(groups)
    perm = rng.permutation(len(pieces))
    for i in perm[np.argsort(-np.abs(excess[perm]), kind="stable")].tolist():
        open_ = np.flatnonzero(room > 0)
        g = open_[np.argmin(sums[open_] * np.sign(excess[i]))]
        owner[i], room[g], sums[g] = g, room[g] - 1, sums[g] + excess[i]
    first = np.full(groups, len(pieces))
    np.minimum.at(first, owner, np.arange(len(pieces)))
    first[-1] = len(pieces)
    position = np.argsort(np.argsort(first, kind="stable"))
    return pieces[np.lexsort((np.arange(len(pieces)), position[owner]))]


"""Sequence packing as a pure plan: documents cut into rows of exactly `length` tokens.

Each rank's *stream* is its CorgiPile buffer plan read as if it had one worker (the order of
``EpochPlanner.plan(rank, 0, 1)``), the padding repeats of the sample plan left out, so that
every document of the epoch is in exactly one rank's stream.  Each document takes its token
count (its manifest size, +1 with an end-of-document token) of consecutive *slots*; slot ``s``
is column ``s % length`` of row ``s // length``.  With ``split_documents`` the documents are
back to back (row i is tokens ``[i*L, (i+1)*L)`` of the stream: a document may straddle two
rows); without it a document that does not fit in its row's room starts the next row, the room
left as padding (one longer than a row still spans whole rows).  Every rank yields ``rows``
rows, the most any rank's stream needs: a shorter stream ends with padding rows.

The rows do not depend on the DataLoader worker count: worker k of K takes a contiguous share
of the rank's rows (`RowPlanner.plan`), and reads the buffers that overlap it.  A resume counts the
rows each worker yielded (`remaining_rows`).  No I/O, no torch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from corgi_io.errors import ResumeError

from corgi_io.schedule.epoch import EpochPlanner
from corgi_io.schedule.pieces import EMPTY
from corgi_io.schedule.planner import Planner
from corgi_io.schedule.resume import closed_segments
from corgi_io.schedule.workers import worker_counts


@dataclass(frozen=True)
class RowOptions:
    """How documents become rows: `length` tokens a row, one end token after each document with `eos`,
    documents split across rows (`split_documents`) or starting a new row when they do not fit."""

    length: int
    eos: bool = False
    split_documents: bool = True


def place_documents(lengths: np.ndarray, length: int, split: bool) -> np.ndarray:
    """The first slot of each document (int64), documents of `lengths` tokens in stream order, rows of `length`.

    Split: back to back, O(n) with numpy.  Not split: a greedy in one pass, O(n) in Python: a document
    longer than its row's room (and not at a row's start) starts the next row.
    """
    lengths = np.asarray(lengths, np.int64)
    ends = np.cumsum(lengths)
    if split:
        return ends - lengths
    starts, slot = np.empty(len(lengths), np.int64), 0
    for i, n in enumerate(lengths.tolist()):
        room = length - slot % length
        if n > room and room < length:
            slot += room
        starts[i] = slot
        slot += n
    return starts


@dataclass(frozen=True, eq=False)
class RankStream:
    """One rank's documents in stream order: sample ids, token counts (with the end token), first slots, and
    per buffer its pieces and the stream index of its first document (`bounds`, one more than buffers)."""

    ids: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    buffer_pieces: list
    bounds: np.ndarray

    @property
    def end(self) -> int:
        """The slot after the stream's last token."""
        return int(self.starts[-1] + self.lengths[-1]) if len(self.ids) else 0

    def buffers(self, lo: int, hi: int):
        """(pieces, first, stop) of each buffer holding tokens of slots [lo, hi): its documents ``first:stop``
        of the stream are those with a token there, and `pieces` the buffer's pieces that hold them."""
        first_doc = int(np.searchsorted(self.starts + self.lengths, lo, "right"))
        stop_doc = int(np.searchsorted(self.starts, hi, "left"))
        if first_doc >= stop_doc:
            return
        a = int(np.searchsorted(self.bounds, first_doc, "right")) - 1
        z = int(np.searchsorted(self.bounds, stop_doc, "left"))
        for b in range(a, z):
            first, stop = max(first_doc, int(self.bounds[b])), min(stop_doc, int(self.bounds[b + 1]))
            yield holding(self.buffer_pieces[b], self.ids[first:stop]), first, stop


def holding(pieces: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The rows of `pieces` that hold any of `ids` (one sorted search per piece end: O((P + n) log n))."""
    ids = np.sort(ids)
    return pieces[np.searchsorted(ids, pieces[:, 2]) > np.searchsorted(ids, pieces[:, 1])]


def first_occurrences(orders: list) -> list:
    """Per array of `orders` (the ranks' sample ids in stream order), a mask of the ids seen nowhere before it
    (in an earlier array, or earlier in it): the padding repeats left out.  O(N log N) over all N ids."""
    flat = np.concatenate(orders) if orders else np.zeros(0, np.int64)
    keep = np.zeros(len(flat), bool)
    keep[np.unique(flat, return_index=True)[1]] = True
    return np.split(keep, np.cumsum([len(o) for o in orders])[:-1])


@dataclass(frozen=True, eq=False)
class RowPlanner(Planner):
    """The rows of one epoch, over the epoch's sample `planner` (planned without batches), in batches of
    `batch_size` rows (None: rows one by one).  Plans every rank's stream once, on first use: O(N log N)
    for the N samples (the greedy of unsplit documents adds O(N) in Python), as every rank must know how
    many rows the longest stream needs."""

    counts_items = False  # resume counts rows, which its own `resumed_plan` turns into row ranges

    planner: EpochPlanner
    options: RowOptions
    batch_size: int | None = None

    @property
    def spec(self):
        """The epoch's `EpochSpec` (its epoch and world size, for the loader's progress)."""
        return self.planner.spec

    @property
    def cost_model(self):
        """The sample plan's cost model (None: rows take count and size balance only)."""
        return self.planner.cost_model

    def rank_pieces(self, rank: int) -> np.ndarray:
        """Rank `rank`'s pieces of the sample plan (what its stream reads)."""
        return self.planner.rank_pieces(rank)

    def worker_pieces(self, rank: int, worker: int, num_workers: int) -> np.ndarray:
        """The pieces one of a rank's `num_workers` DataLoader workers reads: those of the buffers its rows
        overlap (a buffer that two workers' rows share is read by both)."""
        stream, length = self.streams[rank], self.options.length
        return np.concatenate([EMPTY, *(pieces for a, b in self.plan(rank, worker, num_workers)
                                        for pieces, _, _ in stream.buffers(a * length, b * length))])

    def portable(self) -> None:
        """None: a copy of the dataset plans its rows anew."""
        return None

    @functools.cached_property
    def streams(self) -> list:
        """Every rank's `RankStream`, padding repeats left out."""
        plans = [list(self.planner.plan(rank, 0, 1)) for rank in range(self.spec.world_size)]
        orders = [np.concatenate([order for _, order in plan] or [EMPTY[:, 0]]) for plan in plans]
        return [self._stream(plan, keep) for plan, keep in zip(plans, first_occurrences(orders))]

    def _stream(self, plan: list, keep: np.ndarray) -> RankStream:
        """One rank's stream from its buffer plan and the mask of its ids to keep."""
        kept = np.split(keep, np.cumsum([len(order) for _, order in plan])[:-1]) if plan else []
        orders = [order[mask] for (_, order), mask in zip(plan, kept)]
        ids = np.concatenate(orders) if orders else np.zeros(0, np.int64)
        lengths = np.asarray(self.planner.table.sizes[:], np.int64)[ids] + self.options.eos
        starts = place_documents(lengths, self.options.length, self.options.split_documents)
        bounds = np.concatenate(([0], np.cumsum([len(order) for order in orders], dtype=np.int64)))
        return RankStream(ids, lengths, starts, [pieces for pieces, _ in plan], bounds)

    @functools.cached_property
    def rows(self) -> int:
        """Rows every rank yields: the most that any rank's stream fills."""
        return max(-(-stream.end // self.options.length) for stream in self.streams)

    def rank_items(self, rank: int) -> int:
        """What every rank yields per epoch: rows, or batches of rows (the last one may be short)."""
        return self.rows if self.batch_size is None else -(-self.rows // self.batch_size)

    def waste(self) -> float:
        """The epoch's share of padding slots, over all ranks' rows (0 when there is no row)."""
        tokens = sum(int(stream.lengths.sum()) for stream in self.streams)
        slots = self.rows * self.options.length * self.spec.world_size
        return 1 - tokens / slots if slots else 0.0

    def plan(self, rank: int, worker: int, num_workers: int) -> list:
        """The row ranges ``[(first, stop)]`` one worker of a rank yields, in order (the same for every rank)."""
        return shares([(0, self.rows)] if self.rows else [], num_workers, self.batch_size or 1)[worker]

    def resumed_plan(self, rank: int, worker: int, num_workers: int, resume: dict) -> tuple:
        """(row ranges, finished segments, rows already yielded) of one worker resuming `resume` (`merge_states`),
        as `corgi_io.schedule.resume.resumed_plan` for samples.  The same worker count continues each worker's own
        share after its yielded rows, exactly; another one deals the rows no worker yielded over the new workers
        (that needs every worker's progress).  Rows are cut from each rank's own stream: ResumeError for a state
        of another world size."""
        finished, yielded = resume["finished"], resume["yielded"]
        if resume["world_size"] != self.spec.world_size:
            raise ResumeError(f"TokenRows rows are cut from each rank's own stream: resume them with the saved "
                              f"world size ({resume['world_size']} ranks), not {self.spec.world_size}")
        batch = self.batch_size or 1
        if resume["num_workers"] == num_workers and worker in yielded:
            share = shares(remaining_rows(self.rows, finished, batch), num_workers, batch)[worker]
            return take(share, yielded[worker], self.rows), finished, yielded[worker]
        finished = closed_segments(resume)
        return shares(remaining_rows(self.rows, finished, batch), num_workers, batch)[worker], finished, 0


def take(ranges: list, first: int, stop: int) -> list:
    """Positions ``[first, stop)`` of the concatenation of `ranges` (rows (a, b)), as ranges.  O(len(ranges))."""
    out, offset = [], 0
    for a, b in ranges:
        lo, hi = max(first - offset, 0), min(stop - offset, b - a)
        if lo < hi:
            out.append((a + lo, a + hi))
        offset += b - a
    return out


def shares(ranges: list, num_workers: int, batch: int) -> list:
    """The rows of `ranges` dealt to `num_workers` workers (0: the main process) as contiguous shares of whole
    batches of `batch` rows (`worker_counts`: the same cut as a sample plan's)."""
    counts = worker_counts(sum(b - a for a, b in ranges), num_workers, batch)
    bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
    return [take(ranges, bounds[k], bounds[k + 1]) for k in range(len(counts))]


def remaining_rows(rows: int, finished: list, batch: int) -> list:
    """The row ranges that the `finished` segments ({num_workers, yielded}: rows per worker) left, in order.
    Each segment dealt what the ones before it left to its workers; worker w yielded its first `yielded[w]`."""
    ranges = [(0, rows)] if rows else []
    for segment in finished:
        dealt = shares(ranges, segment["num_workers"], batch)
        ranges = [r for share, done in zip(dealt, segment["yielded"]) for r in take(share, done, rows)]
    return ranges

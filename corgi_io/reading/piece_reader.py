"""PieceReader: a worker's buffer plan executed as small stages, read-ahead → verify → split → order.

The plan (`corgi_io.schedule.buffer_plan`) lists, per buffer, the pieces to read (runs of
whole samples inside one block) and the order to yield the buffer's samples in.  The stages:

1. read-ahead (`read_ahead.py`): one ranged read per piece, on `read_threads` threads, at most
   `prefetch_pieces` pieces read or in flight ahead of the consumer (with `fields`, the asked fields' runs
   instead, in one `read_ranges` call: `field_reads.py`);
2. verify (`corgi_io.reading.read_checks.PieceVerifier`): the shard's size on its first read and every
   record's checksum, before any of the piece's samples exists;
3. split (`split.py`): the piece cut into sample dicts by the manifest's offsets;
4. order (`order.py`): samples held until their buffer ends, then yielded in the plan's order.

Stages 1-3 run in the reading thread, one piece after the other: the split copies each payload
out of bytes that the read and the checksum have just brought into that core's cache, and the
consumer's thread is left with the ordering (on bench/load.py's corpus: 11.8 against 15 µs of CPU per sample
when the split ran in the consumer).

Memory bound: the resident sample data is at most the current buffer's pieces plus
`prefetch_pieces` pieces read or in flight; in window mode the window (as many samples as the
buffer's blocks hold) plus the one piece being pushed through it replace the buffer.
`peak_resident_bytes` records the observed maximum: bytes committed at each read's submission
plus the payloads held, sampled whenever a read is submitted (the only moment the total grows).

Timing (`clock`, a `corgi_io.timing.clock.StageClock`): each piece's read is timed in its reading thread as
``storage`` (or, through a cache, ``cache_hit`` / ``cache_miss``; ``first_byte`` where the storage tells it),
then ``verify`` and ``split``; the consumer's wait for the read-ahead as ``read_wait``: one `add` per stage and
piece, nothing per sample.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter

from corgi_io.reading.read_checks import PieceVerifier

from corgi_io.reading.field_reads import FieldSplitter, read_runs
from corgi_io.reading.in_flight import InFlight, nbytes_of
from corgi_io.reading.reorder import buffer_order
from corgi_io.reading.read_ahead import Marker, read_ahead
from corgi_io.reading.raw_batches import PieceRows, ordered_batches
from corgi_io.reading.split import PieceSplitter
from corgi_io.storage.base import first_byte_seconds
from corgi_io.timing.clock import NULL_CLOCK
from corgi_io.timing.stages import stage_index

STORAGE, FIRST_BYTE, CACHE_HIT, CACHE_MISS, VERIFY, SPLIT = map(
    stage_index, ("storage", "first_byte", "cache_hit", "cache_miss", "verify", "split"))


class Residency:
    """Bytes of sample data held, and their peak: pieces read or being read, plus payloads split and not yet yielded."""

    def __init__(self):
        self.reading = self.payloads = self.peak = 0

    @property
    def held(self) -> int:
        return self.reading + self.payloads

    def hold(self, nbytes: int) -> None:
        """A read of `nbytes` was submitted."""
        self.reading += nbytes
        self.peak = max(self.peak, self.held)

    def split(self, record_bytes: int, payload_bytes: int) -> None:
        """A piece of `record_bytes` became samples holding `payload_bytes` (its framing is gone)."""
        self.reading -= record_bytes
        self.payloads += payload_bytes

    def release(self, nbytes: int) -> None:
        """Payloads of `nbytes` left (yielded, or dropped as repeats)."""
        self.payloads -= nbytes

    def release_all(self) -> None:
        """Every split payload left: no sample is held any more."""
        self.payloads = 0


class PieceReader:
    """Reads the pieces of a buffer plan through a Storage, `prefetch_pieces` ahead, and yields their samples.

    With `verify` (the default) every piece passes `PieceVerifier` in the reading thread: its
    shard's size and every record's checksum are checked before any of its samples is yielded.
    `read_threads` fixes the reads in flight; by default the storage's `reads_in_flight` (first,
    most) applies, and `InFlight` grows the first towards the most while it pays.  With a `cache`
    (`corgi_io.reading.piece_cache.PieceCache`, for remote packs) every piece goes through it, and is
    checked there, whatever `verify` says.  A `pool` (`corgi_io.reading.buffers.BufferPool`) gives `batches` reused
    buffers to read local pieces into.  `clock` times the stages (see the module).  `fields` (names, from
    `field_reads.wanted_fields`) reads only those fields of each piece's samples, each checked against its own
    checksum, past any cache (`corgi_io.reading.field_reads`); samples only, not `batches`.
    """

    def __init__(self, manifest, storage, prefetch_pieces: int = 16, read_threads: int | None = None,
                 verify: bool = True, cache=None, pool=None, clock=NULL_CLOCK, fields=None):
        self.manifest, self.storage, self.clock = manifest, storage, clock
        self.cache = cache if fields is None else None  # a few percent of a piece: not worth a cache's disk
        self.pool = pool if self.cache is None and hasattr(storage, "read_range_into") else None
        self.verifier = PieceVerifier(manifest, storage) if verify else None
        self.splitter = PieceSplitter(manifest)
        self.fields = None if fields is None else FieldSplitter(manifest, fields, self.splitter.describe)
        self.prefetch_pieces = max(1, prefetch_pieces)
        start, most = storage.reads_in_flight if read_threads is None else (read_threads, read_threads)
        self.read_threads = max(1, min(most, self.prefetch_pieces))
        self.in_flight = InFlight(start, self.read_threads)
        self.residency = Residency()

    @property
    def peak_resident_bytes(self) -> int:
        """The most sample data held at once: payloads not yet yielded plus pieces read or being read."""
        return self.residency.peak

    def byte_range(self, piece) -> tuple:
        """(shard path, offset, length) of one piece: first record's start to last record's end.  A whole block's
        comes from the block table, so sizing a read ahead touches no per-sample row (on a remote pack that
        would fetch the block's rows in the consumer's thread instead of the reading thread's)."""
        block, start, stop = (int(x) for x in piece)
        b = self.manifest.blocks
        if self._whole(piece):
            return self.manifest.shards[int(b.shard[block])].path, int(b.offset[block]), int(b.length[block])
        s = self.manifest.samples
        offset = int(s.offset[start])
        return self.manifest.shards[int(s.shard[start])].path, offset, int(s.offset[stop - 1] + s.length[stop - 1]) - offset

    def samples(self, plan):
        """Yield sample dicts (index, key, label, size, kind, ext, data) in the plan's order, reading every piece once.

        A sample listed twice (padding can repeat one on a worker) is yielded as two distinct dicts.
        """
        return ordered_samples(plan, self.piece_samples, lambda piece: self.byte_range(piece)[2], self.residency,
                               ahead=self.prefetch_pieces, threads=self.read_threads, clock=self.clock)

    def batches(self, plan, batch_size: int, allocate=None):
        """Yield the plan's samples as `RowBatch`es of `batch_size` (the last one shorter), in the order `samples`
        yields them, built without a dict per sample (`corgi_io.reading.raw_batches`; single-field packs); `allocate`
        makes their buffers (`ordered_batches`)."""
        return ordered_batches(plan, self.piece_rows, lambda piece: self.byte_range(piece)[2], self.residency,
                               batch_size, ahead=self.prefetch_pieces, threads=self.read_threads, allocate=allocate,
                               clock=self.clock)

    def read_piece(self, piece, into=None) -> bytes:
        """A piece's records: one ranged read (or the cache's copy), verified when verification is on.  `into`: a
        buffer of the piece's length to read into instead (local storage, no cache), returned filled.

        The piece's rows are checked, once per block, before they are trusted.  A whole block of a remote pack has
        its byte range from the block table (checked at open): its rows are then fetched and checked on a thread of
        their own while its bytes are read, so that the two round trips overlap instead of adding up before a
        process's first pieces; its bytes are checked once both are in."""
        block, start, stop = (int(x) for x in piece)
        if self.manifest.row_groups is None or self.manifest.rows_checked[block] or not self._whole(piece):
            self.manifest.validate_rows(start, stop)
            return self._read_checked(piece, into)
        with ThreadPoolExecutor(1, thread_name_prefix="corgi-rows") as pool:
            return self._read_checked(piece, into, pool.submit(self.manifest.validate_rows, start, stop).result)

    def _read_checked(self, piece, into=None, rows_checked=None) -> bytes:
        """`read_piece` once its rows are checked, or once `rows_checked()` returns after the read."""
        path, offset, length = self.byte_range(piece)
        read = self.storage.read_range if into is None else self.storage.read_range_into
        fetch = functools.partial(_then, functools.partial(self.in_flight.run, read, path, offset,
                                                           length if into is None else into), rows_checked)
        if self.cache is not None:
            return self._through_cache(piece, fetch)  # checked there, fetched or not
        timed = functools.partial(self._timed_fetch, STORAGE, piece, fetch)
        if self.verifier is None:
            return timed()
        data = self.verifier.sized_read(int(self.manifest.blocks.shard[int(piece[0])]), timed)  # no row needed
        start = perf_counter()
        self.verifier.check_piece(piece, data)
        self.clock.add(VERIFY, perf_counter() - start, len(data), int(piece[2]) - int(piece[1]))
        return data

    def _timed_fetch(self, stage: int, piece, fetch) -> bytes:
        """`fetch()`, timed as `stage` (``storage`` or ``cache_miss``), and its wait for a first byte where the
        storage tells it (`storage.base.first_byte_seconds`: this thread's running total)."""
        waited, start = first_byte_seconds(), perf_counter()
        data = fetch()
        self.clock.add(stage, perf_counter() - start, nbytes_of(data), int(piece[2]) - int(piece[1]))
        waited = first_byte_seconds() - waited
        if waited > 0:
            self.clock.add(FIRST_BYTE, waited)
        return data

    def _through_cache(self, piece, fetch) -> bytes:
        """The piece through the cache: timed as a ``cache_hit`` when it was there, else its fetch as a
        ``cache_miss`` and the rest (the check, the hand-over to the cache's writer) as ``verify``."""
        fetched = []  # the seconds of the fetch, when the cache had to fetch

        def timed_fetch() -> bytes:
            start = perf_counter()
            data = self._timed_fetch(CACHE_MISS, piece, fetch)
            fetched.append(perf_counter() - start)
            return data

        start = perf_counter()
        data = self.cache.read(piece, timed_fetch)
        rest = perf_counter() - start - sum(fetched)
        self.clock.add(VERIFY if fetched else CACHE_HIT, rest, len(data), int(piece[2]) - int(piece[1]))
        return data

    def _whole(self, piece) -> bool:
        """Whether `piece` (block, start, stop) is its whole block."""
        block, start, stop = (int(x) for x in piece)
        first = int(self.manifest.blocks.first[block])
        return start == first and stop == first + int(self.manifest.blocks.count[block])

    def warm(self, pieces) -> None:
        """Fetch `pieces` into the cache in the background, for later (`PieceCache.warm`)."""
        ranges = [(tuple(piece), self.byte_range(piece)) for piece in pieces]
        self.cache.warm([(piece, where[2], functools.partial(self.storage.read_range, *where))
                                for piece, where in ranges])

    def piece_samples(self, piece) -> tuple:
        """(its first sample id, the piece's sample dicts, their payload bytes, its record bytes): read, verify and
        split, in a reading thread."""
        if self.fields is not None:
            return self._field_samples(piece)
        data = self.read_piece(piece)
        start = perf_counter()
        samples, payload_bytes = self.splitter.split(piece, data)
        self.clock.add(SPLIT, perf_counter() - start, len(data), len(samples))
        return int(piece[1]), samples, payload_bytes, len(data)

    def _field_samples(self, piece) -> tuple:
        """`piece_samples` of a field-only read: the asked fields' runs read (`_read_fields`), each field checked
        against its own checksum (``verify``), the samples made of them (``split``).  Its record bytes are the
        piece's whole range, what its read-ahead counted as held (a bound known without the field rows)."""
        runs, data = self._read_fields(piece)
        nbytes, count = nbytes_of(data), int(piece[2]) - int(piece[1])
        start = perf_counter()
        payloads = self.fields.cut(runs, data)
        cut = perf_counter() - start
        if self.verifier is not None:
            start = perf_counter()
            self.fields.check(runs, payloads, self.storage)
            self.clock.add(VERIFY, perf_counter() - start, nbytes, count)
        start = perf_counter()
        samples, payload_bytes = self.fields.split(piece, runs, payloads)
        self.clock.add(SPLIT, cut + perf_counter() - start, nbytes, count)
        return int(piece[1]), samples, payload_bytes, self.byte_range(piece)[2]

    def _read_fields(self, piece) -> tuple:
        """(the piece's `FieldRuns`, each run's bytes): the field rows (validated; fetched, on a remote pack) and the
        runs' reads, timed together as ``storage``; the shard's size checked on its first read when verifying."""
        shard = int(self.manifest.blocks.shard[int(piece[0])])
        path, found = self.manifest.shards[shard].path, []

        def fetch() -> list:
            found.append(self.fields.runs(piece))
            return self.in_flight.run(read_runs, self.storage, path, found[0])

        timed = functools.partial(self._timed_fetch, STORAGE, piece, fetch)
        data = timed() if self.verifier is None else self.verifier.sized_read(shard, timed)
        return found[0], data

    def piece_rows(self, piece) -> PieceRows:
        """The piece read and verified, its samples as columns (`PieceSplitter.columns`), in a reading thread: into
        a buffer of the reader's `pool` when it has one (given back once the piece's rows are batched)."""
        if self.pool is None:
            data = self.read_piece(piece)
            return PieceRows(int(piece[1]), data, self._columns(piece, len(data)))
        buffer = self.pool.take(self.byte_range(piece)[2])
        try:
            self.read_piece(piece, into=buffer)
        except BaseException:
            self.pool.give(buffer)
            raise
        return PieceRows(int(piece[1]), buffer, self._columns(piece, len(buffer)), self.pool.give)

    def _columns(self, piece, nbytes: int) -> dict:
        """The piece's samples as columns (`PieceSplitter.columns`), timed as ``split``."""
        start = perf_counter()
        columns = self.splitter.columns(piece)
        self.clock.add(SPLIT, perf_counter() - start, nbytes, int(piece[2]) - int(piece[1]))
        return columns


def _then(read, after=None) -> bytes:
    """`read()`'s bytes, once `after()` (when given) has returned too."""
    data = read()
    if after is not None:
        after()
    return data


def ordered_samples(plan, read, nbytes, residency: Residency, *, ahead: int, threads: int, clock=NULL_CLOCK):
    """The samples of a buffer plan in its order: each piece read by `read(piece)` (-> first id, samples, payload
    bytes, record bytes) on `threads` threads, at most `ahead` pieces ahead; `nbytes(piece)` is what a read
    commits, counted in `residency`; `clock` times the consumer's wait for reads."""
    steps = (step for pieces, order in plan for step in (*map(tuple, pieces.tolist()), Marker(order)))
    pieces = read_ahead(steps, read, ahead=ahead, threads=threads, on_submit=lambda piece: residency.hold(nbytes(piece)),
                        clock=clock)
    try:
        yield from buffer_order(_settled(pieces, residency), residency)
    finally:
        pieces.close()  # stop the reading threads now, not when the chain is collected


def _settled(pieces, residency: Residency):
    """(first id, samples) and markers on to the order stage; a piece's framing stops counting as held.  No local
    names a piece's samples while a marker is out (the order stage yields the buffer then, and a yielded sample
    must not stay alive here: `buffer_order`)."""
    for item in pieces:
        yield item if isinstance(item, Marker) else _framing_counted(item, residency)


def _framing_counted(item: tuple, residency: Residency) -> tuple:
    first, samples, payload_bytes, record_bytes = item
    residency.split(record_bytes, payload_bytes)
    return first, samples

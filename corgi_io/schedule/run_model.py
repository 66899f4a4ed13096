"""A run priced before it starts (`corgi plan --simulate`): epoch wall time, remote bytes, cache hits, memory.

Everything comes from the plan, which is a pure function of (seed, epoch, world size): `predict_run` takes the
loader's planner of each epoch (`epoch.loader_planner`: each worker's buffer plan, exactly what it reads), the
bytes of every piece (`PieceBytes`: the block table's lengths) and a `RunModel` of the machine.

The model, per rank (docs/algorithms.md, "Pricing a run"):

* **reads** (`run_clock.py`): each worker reads its pieces in plan order, `in_flight` at once and at most
  `prefetch` ahead of its consumer; a read costs `latency` before its first byte, then its bytes over the rank's
  link of `bandwidth`, shared equally by every transfer of the rank's workers under way;
* **decode**: each worker's one consumer thread spends `decode` s per sample plus `decode_per_byte` s per byte
  on a buffer once all its pieces are in (workers beyond `cores` share them), while the reads of the next
  buffer go on: a worker's time is about max(reads, decode) plus the first buffer's reads;
* **start**: each worker begins `start` s after the epoch (a DataLoader worker process's start);
* **the rank** takes as long as its slowest worker (a DataLoader takes its workers' batches in turn);
* **cache** (`cache_replay.py`): one folder of `cache_bytes` per rank, replayed with the loader's own eviction
  policy; a hit costs no read time; epochs after the first start from the folder the one before left;
* **memory**: per worker, the most bytes of a buffer plus the `prefetch` pieces read ahead of it (the reader's
  bound, `reading/piece_reader.py`); per rank, its workers' sum.

Left out: the loader's own CPU per sample (split, order, collate: ~15 us, against a decode of ~1 ms), the
manifest's requests, the training step (the loader is assumed to run flat out).

Cost: the planning of every rank's workers, O(N) per epoch (what the loader itself computes); the clock
O(P log P) for a rank of P pieces; the cache O(R K log R) for R reads by K workers.  No I/O, no torch.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from corgi_io.arguments import check_at_least, check_number, choose
from corgi_io.schedule.cache_replay import CacheReplay, piece_keys
from corgi_io.schedule.eviction import EVICTIONS
from corgi_io.schedule.run_clock import RankClock, WorkerPass


@dataclass(frozen=True)
class RunModel:
    """The machine a run is priced on: `bandwidth` (bytes/s of a rank's link to the pack, shared by its workers;
    inf: no limit), `latency` (s before each read's first byte), `in_flight` (reads per worker at once:
    `Reading(threads)`), `prefetch` (pieces read ahead per worker: `Reading(prefetch_blocks)`; None: the buffer's
    blocks), `decode` (CPU s per sample, as `corgi profile` measures it) and `decode_per_byte` (CPU s per byte
    read), `cores` (CPU cores a rank's workers share; None: one each), `start` (s before a worker's first read:
    its process's start), `cache_bytes` (a rank's cache of remote pieces, 0: none) and `cache_policy`
    (`Cache(policy=)`)."""

    bandwidth: float = math.inf
    latency: float = 0.0
    in_flight: int = 2
    prefetch: int | None = None
    decode: float = 0.0
    decode_per_byte: float = 0.0
    cores: int | None = None
    start: float = 0.0
    cache_bytes: int = 0
    cache_policy: str = "belady"

    def __post_init__(self):
        check_number("bandwidth", self.bandwidth, strict=True)
        for name in ("latency", "decode", "decode_per_byte", "start"):
            check_number(name, getattr(self, name))
        check_at_least("in_flight", self.in_flight, 1, optional=False)
        check_at_least("prefetch", self.prefetch, 1)
        check_at_least("cores", self.cores, 1)
        check_at_least("cache_bytes", self.cache_bytes, 0, optional=False)
        choose("cache_policy", self.cache_policy, EVICTIONS)

    def as_dict(self) -> dict:
        """The fields as JSON can hold them (an unlimited bandwidth is None)."""
        return {**asdict(self), "bandwidth": None if math.isinf(self.bandwidth) else self.bandwidth}


class PieceBytes:
    """Bytes of each piece's one ranged read, as `PieceReader.byte_range` has them: a whole block's from the block
    table (`lengths`), a piece of a block from its first record's offset to its last record's end (`offsets`,
    `record_lengths`: the per-sample columns; without them, the block's bytes in proportion to its samples)."""

    def __init__(self, first, count, lengths, offsets=None, record_lengths=None):
        self.first, self.count = np.asarray(first, np.int64), np.asarray(count, np.int64)
        self.lengths, self.offsets, self.record_lengths = np.asarray(lengths, np.int64), offsets, record_lengths

    def __call__(self, pieces) -> np.ndarray:
        pieces = np.asarray(pieces, np.int64).reshape(-1, 3)
        blocks, start, stop = pieces.T
        out = self.lengths[blocks].copy()
        for i in np.flatnonzero((start != self.first[blocks]) | (stop != self.first[blocks] + self.count[blocks])):
            a, z = int(start[i]), int(stop[i])
            if self.offsets is None:
                out[i] = out[i] * (z - a) // max(1, int(self.count[blocks[i]]))
            else:
                out[i] = int(self.offsets[z - 1]) + int(self.record_lengths[z - 1]) - int(self.offsets[a])
        return out


@dataclass(frozen=True)
class Chunked:
    """One worker's epoch: its pieces in read order, their bytes, and per buffer its end (one past its last
    piece) and the samples it yields."""

    pieces: np.ndarray
    nbytes: np.ndarray
    ends: np.ndarray
    samples: np.ndarray


def worker_epoch(plan, piece_bytes) -> Chunked:
    """A worker's buffer plan ((pieces, sample ids) per buffer) as a `Chunked`; the ids are not kept."""
    chunks = [(np.asarray(pieces, np.int64).reshape(-1, 3), len(order)) for pieces, order in plan]
    pieces = np.concatenate([p for p, _ in chunks]) if chunks else np.zeros((0, 3), np.int64)
    ends = np.cumsum([len(p) for p, _ in chunks], dtype=np.int64)
    return Chunked(pieces, piece_bytes(pieces), ends, np.array([n for _, n in chunks], np.int64))


def epoch_workers(planner, piece_bytes, workers: int) -> list:
    """[rank][worker] -> `Chunked` of one epoch's planner, every rank placed once (`every_rank_pieces`)."""
    planner.every_rank_pieces()
    k = max(1, workers)
    return [[worker_epoch(planner.plan(r, w, k), piece_bytes) for w in range(k)]
            for r in range(planner.spec.world_size)]


def buffer_cpu(work: Chunked, model: RunModel) -> np.ndarray:
    """CPU seconds of each buffer: its samples' decode plus its bytes'."""
    starts = np.concatenate(([0], work.ends[:-1])) if len(work.ends) else work.ends
    nbytes = np.add.reduceat(work.nbytes, starts) if len(work.nbytes) else np.zeros(len(work.ends))
    nbytes = np.where(work.ends > starts, nbytes, 0)  # reduceat gives an empty buffer its next piece's bytes
    return work.samples * model.decode + nbytes * model.decode_per_byte


def memory_bound(work: Chunked, ahead: int) -> int:
    """The most bytes a worker holds: a buffer's pieces plus the `ahead` pieces read after it."""
    if not len(work.ends):
        return 0
    cum = np.concatenate(([0], np.cumsum(work.nbytes)))
    starts = np.concatenate(([0], work.ends[:-1]))
    after = cum[np.minimum(work.ends + ahead, len(work.nbytes))] - cum[work.ends]
    return int((cum[work.ends] - cum[starts] + after).max())


def rank_epoch(works: list, remote: list, warm: list, model: RunModel, ahead: int) -> dict:
    """{"time", "decode"} of one rank's epoch (`remote`: per worker, which reads cross the link; `warm`: the bytes
    it fetches ahead for the next epoch): its slowest worker's end (`RankClock`) and the most CPU time of one of
    its workers."""
    slow = max(1.0, len(works) / model.cores) if model.cores else 1.0
    cpu = [buffer_cpu(work, model) for work in works]
    passes = [WorkerPass(work.nbytes, flags, work.ends, c, ahead_bytes)
              for work, flags, c, ahead_bytes in zip(works, remote, cpu, warm)]
    clock = RankClock(passes, latency=model.latency, bandwidth=model.bandwidth, threads=min(model.in_flight, ahead),
                      ahead=ahead, slow=slow, start=model.start)
    return {"time": max(clock.run(), default=0.0), "decode": max((float(c.sum()) * slow for c in cpu), default=0.0)}


def cache_epochs(epochs: list, model: RunModel, ahead: int) -> list:
    """Per rank, per epoch but the last (known only as the future): the `CacheReplay.epoch` results."""
    out = []
    for rank in range(len(epochs[0])):
        keys = [[piece_keys(work.pieces) for work in epoch[rank]] for epoch in epochs]
        sizes = {}
        for epoch_keys, epoch in zip(keys, epochs):
            for names, work in zip(epoch_keys, epoch[rank]):
                sizes.update(zip(names, work.nbytes.tolist()))
        replay = CacheReplay(model.cache_bytes, sizes, model.cache_policy, prefetch=ahead,
                             streams=min(model.in_flight, ahead))
        out.append([replay.epoch(keys[e], keys[e + 1]) for e in range(len(epochs) - 1)])
    return out


def predict_run(planner_of, piece_bytes, model: RunModel, *, workers: int = 0, epochs: int = 1,
                first_epoch: int = 0) -> dict:
    """The priced run: `planner_of(epoch)` gives the loader's planner of an epoch (`loader_planner`), `piece_bytes`
    a pieces array's bytes (`PieceBytes`), `workers` the DataLoader workers per rank (0: the main process).

    Returns {"model", "epochs": per epoch {"epoch", "wall_time" (s, the slowest rank's), "slowest_rank",
    "rank_time" (per rank), "decode_time" (the most CPU s of a worker), "read_bytes" (every piece read, all
    ranks), "remote_bytes" (fetched: all of it without a cache; with one, the misses and the prefetch of the next
    epoch), "hit_rate" (None without a cache)}, "memory": {"worker", "rank"} (bytes, the most of any)}."""
    check_at_least("epochs", epochs, 1, optional=False)
    cached = model.cache_bytes > 0
    planners = [planner_of(e) for e in range(first_epoch, first_epoch + epochs + cached)]
    plans = [epoch_workers(planner, piece_bytes, workers) for planner in planners]
    ahead = model.prefetch or planners[0].spec.buffer_pieces
    replays = cache_epochs(plans, model, ahead) if cached else None
    rows = [_epoch_row(first_epoch + e, plans[e], replays and [r[e] for r in replays], model, ahead)
            for e in range(epochs)]
    worker_bytes = [[memory_bound(work, ahead) for work in rank] for epoch in plans for rank in epoch]  # every epoch
    return {"model": model.as_dict(), "workers": workers, "epochs": rows,
            "memory": {"worker": max(map(max, worker_bytes)), "rank": max(map(sum, worker_bytes))}}


def _epoch_row(epoch: int, ranks: list, replays, model: RunModel, ahead: int) -> dict:
    """One epoch's line of `predict_run`."""
    remote = [r["remote"] for r in replays] if replays else [[np.ones(len(w.nbytes), bool) for w in rank]
                                                            for rank in ranks]
    warm = [r["warm"] for r in replays] if replays else [[()] * len(rank) for rank in ranks]
    times = [rank_epoch(*each, model, ahead) for each in zip(ranks, remote, warm)]
    read = sum(int(w.nbytes.sum()) for rank in ranks for w in rank)
    slowest = int(np.argmax([t["time"] for t in times]))
    hits, reads = (sum(r[k] for r in replays) for k in ("hits", "reads")) if replays else (0, 0)
    return {"epoch": epoch, "wall_time": times[slowest]["time"], "slowest_rank": slowest,
            "rank_time": [t["time"] for t in times], "decode_time": times[slowest]["decode"], "read_bytes": read,
            "remote_bytes": sum(r["remote_bytes"] for r in replays) if replays else read,
            "hit_rate": (hits / reads if reads else 0.0) if replays else None}

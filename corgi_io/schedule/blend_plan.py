"""One epoch of a weighted blend as a pure planner, a `SamplePlanner` (what the loader and resume use).

The epoch is a virtual pack (`blend.BlendEpoch`).  Each source's share of it is planned by its own
`EpochPlanner`, as a pack of its own: every rank gets the same count of that source's samples (count,
size or dynamic balance; padding repeats the head of the source's share), and each source keeps its
own shuffle buffers (``ceil(w_s * buffer_blocks)`` pieces) and, under "corgipile" with batches, its own
size-balanced groups of ``round(w_s * B)``.  A rank's samples are dealt into rows (`compose_rows`: its
batches, or interleaving rows of `SAMPLE_ROW`), identical on every rank; worker k of K takes rows k,
k + K, ... (the DataLoader's round robin) and, from each source, the next stretch of that source's rank
pieces.  `blend_stream` merges the sources' buffer plans into one, a buffer per row, each row's sources
interleaved evenly.  Size balance thus holds per source, in each source's own unit of size.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from corgi_io.errors import CorgiError
from corgi_io.schedule.blend import SAMPLE_ROW, BlendEpoch, compose_rows, epoch_quotas, row_sizes
from corgi_io.schedule.epoch import EpochPlanner, loader_planner
from corgi_io.schedule.modes import SHUFFLES
from corgi_io.schedule.pieces import EMPTY, block_pieces, cut, piece_counts
from corgi_io.schedule.planner import SamplePlanner
from corgi_io.schedule.resume import resumed_plan
from corgi_io.schedule.spec import EpochSpec, samples_per_rank
from corgi_io.schedule.stream import buffer_plan

SOURCE_SEEDS = 1 << 16  # source s of a blend of seed k plans with seed k * SOURCE_SEEDS + s (its own random streams)


@dataclass(frozen=True, eq=False)
class BlendPlanner(SamplePlanner):
    """The plans of one epoch of a blend for ``spec.world_size`` ranks: ``parts[s]`` plans source s's runs of
    ``blend`` (None for a source with none), ``weights`` shape each row, ``batch_size`` (None: samples) sizes
    the rows.  ``rank_cache`` keeps the rows once computed (each source's planner keeps its ranks' pieces)."""

    counts_items = False  # resume counts samples, not plan items

    blend: BlendEpoch
    weights: np.ndarray
    parts: tuple
    spec: EpochSpec
    batch_size: int | None = None
    cost_model: object = None  # per rank (a, b), under balance="dynamic" (each source's planner has it)
    rank_cache: dict = field(default_factory=dict, repr=False)

    @property
    def table(self):
        """The virtual pack's BlockTable (what resume counts samples of)."""
        return self.blend.table

    def for_world(self, world_size: int, runs: np.ndarray | None = None) -> "BlendPlanner":
        """The same epoch planned for `world_size` ranks, or, given `runs` (virtual pieces), the planner of that
        remainder of it: each source's runs count-balanced, the rows dealt anew."""
        if runs is None and world_size == self.spec.world_size:
            return self
        if runs is None:
            parts = tuple(None if p is None else p.for_world(world_size) for p in self.parts)
        else:
            owner = self.blend.source[runs[:, 0]] if len(runs) else np.zeros(0, np.int64)
            parts = tuple(None if p is None or not np.any(owner == s) else p.for_world(world_size, runs[owner == s])
                          for s, p in enumerate(self.parts))
        return replace(self, parts=parts, spec=replace(self.spec, world_size=world_size), rank_cache={})

    def sequence(self) -> np.ndarray:
        """The epoch's virtual blocks as whole pieces, source after source (what a remainder is cut from)."""
        return block_pieces(np.arange(len(self.blend.runs)), self.table.first, self.table.count)

    def totals(self) -> np.ndarray:
        """Samples every rank takes from each source (int64 (S,)): its share of the source's runs."""
        return np.array([0 if p is None else samples_per_rank(int(piece_counts(p.runs).sum()), self.spec.world_size,
                                                                self.spec.drop_last) for p in self.parts], np.int64)

    def rows(self) -> np.ndarray:
        """(rows, S): each row's samples per source, the same on every rank (`compose_rows`)."""
        if "rows" not in self.rank_cache:
            totals = self.totals()
            row, drop = (self.batch_size, self.spec.drop_last) if self.batch_size else (SAMPLE_ROW, False)
            self.rank_cache["rows"] = compose_rows(self.weights, totals, row_sizes(int(totals.sum()), row, drop))
        return self.rank_cache["rows"]

    def source_pieces(self, rank: int) -> list:
        """Rank `rank`'s virtual pieces of each source, in that source's read order (each source's planner
        plans a rank once and keeps it)."""
        return [EMPTY if p is None else p.rank_pieces(rank) for p in self.parts]

    def rank_pieces(self, rank: int) -> np.ndarray:
        """Rank `rank`'s virtual pieces, source after source."""
        return np.concatenate([EMPTY, *self.source_pieces(rank)])

    def _worker_sources(self, rank: int, worker: int, num_workers: int) -> tuple:
        """(the worker's rows, its pieces of each source): rows ``worker::K``, and from each source the stretch of
        the rank's pieces that those rows take, after the stretches of the workers before it."""
        k = max(1, num_workers)
        rows = self.rows()
        mine = rows[worker::k]
        start = rows[np.arange(len(rows)) % k < worker].sum(axis=0)
        pieces = [cut(own, int(a), int(a + n)) if n else EMPTY
                  for own, a, n in zip(self.source_pieces(rank), start.tolist(), mine.sum(axis=0).tolist())]
        return mine, pieces

    def worker_pieces(self, rank: int, worker: int, num_workers: int) -> np.ndarray:
        """The virtual pieces one of a rank's `num_workers` DataLoader workers reads, source after source."""
        return np.concatenate([EMPTY, *self._worker_sources(rank, worker, num_workers)[1]])

    def plan(self, rank: int, worker: int, num_workers: int):
        """The buffer plan of one worker of a rank: (virtual pieces to read, virtual ids to yield) per row."""
        rows, pieces = self._worker_sources(rank, worker, num_workers)
        streams = [iter(()) if not len(own) else
                   buffer_plan(own, sizes=self.table.sizes, **part.spec.stream(rank, worker))
                   for part, own in zip(self.parts, pieces)]
        return blend_stream(streams, rows)

    def rank_items(self, rank: int) -> int:
        """What every rank yields per epoch: samples, or batches (rows) with `batch_size`."""
        return len(self.rows()) if self.batch_size else int(self.totals().sum())

    resumed_plan = resumed_plan  # `corgi_io.schedule.resume.resumed_plan`, this planner its first argument

    def portable(self) -> None:
        """None: a copy of the dataset plans the blend anew (its virtual table is made from the sources')."""
        return None


def blend_planner(tables, weights, samples_per_epoch: int, world_size: int, epoch: int, *, shuffle: str,
                  buffer_blocks: int, seed: int, balance: str, drop_last: bool, batch_size: int | None,
                  group_by_size: bool = False, cost_model=None) -> BlendPlanner:
    """The planner of epoch `epoch` of the blend of the sources `tables` (BlockTables with sizes) with normalised
    `weights` and `samples_per_epoch`, with the options of `loader_planner` (`CorgiPileDataset`'s)."""
    quotas = epoch_quotas(weights, samples_per_epoch)
    blend = BlendEpoch.of(tables, quotas, seed, epoch, SHUFFLES[shuffle].shuffles_blocks)
    base = loader_planner(blend.table, world_size, epoch, shuffle=shuffle, buffer_blocks=buffer_blocks, seed=seed,
                          balance=balance, drop_last=drop_last, batch_size=batch_size, group_by_size=group_by_size,
                          cost_model=cost_model)
    parts = []
    for s, w in enumerate(np.asarray(weights, np.float64).tolist()):
        runs = blend.source_runs(s)
        spec = replace(base.spec, seed=seed * SOURCE_SEEDS + s, buffer_pieces=max(1, int(np.ceil(w * buffer_blocks))),
                       batch_size=None if base.spec.batch_size is None else max(1, round(w * batch_size)))
        parts.append(EpochPlanner(blend.table, spec, None, base.cost_model, None, runs) if len(runs) else None)
    return BlendPlanner(blend, np.asarray(weights, np.float64), tuple(parts), base.spec, batch_size, base.cost_model)


def blend_stream(streams, rows: np.ndarray):
    """One buffer plan from the sources' buffer plans `streams`: for each row, the pieces of the sources' buffers
    it opens, and its ids (``rows[j, s]`` from source s, the next ones in s's yield order) interleaved evenly.
    CorgiError when a source's plan runs out (the rows and the pieces disagree: a planner bug)."""
    pending = [np.zeros(0, np.int64) for _ in streams]
    for row in rows.tolist():
        reads, taken = [EMPTY], []
        for s, need in enumerate(row):
            while len(pending[s]) < need:
                opened = next(streams[s], None)
                if opened is None:
                    raise CorgiError(f"blend plan: source {s} holds {len(pending[s])} samples for a row of {need}")
                reads.append(opened[0])
                pending[s] = np.concatenate((pending[s], opened[1]))
            taken.append(pending[s][:need])
            pending[s] = pending[s][need:]
        yield np.concatenate(reads), interleave(taken)


def interleave(parts: list) -> np.ndarray:
    """The ids of `parts` merged so that each part is spread evenly (part s's i-th id at ``(i + 0.5) / len``)."""
    keys = np.concatenate([(np.arange(len(p)) + 0.5) / max(len(p), 1) for p in parts])
    return np.concatenate(parts)[np.argsort(keys, kind="stable")] if len(keys) else np.zeros(0, np.int64)

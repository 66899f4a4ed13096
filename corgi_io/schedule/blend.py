"""Weighted blending of several packs as pure planning: quotas, passes, each epoch's runs, batch composition.

A blend reads S packs (sources) with weights w_s.  Its planning needs no I/O and no torch:

* **Quotas.**  An epoch holds `samples_per_epoch` samples; source s gives q_s of them, the
  largest-remainder rounding of ``w_s * samples_per_epoch`` (so ``|q_s / N - w_s| < 1 / N``).
* **Passes (epochized blending).**  Source s is read as an endless stream of passes; pass p is
  its blocks in the CorgiPile block order of ``(seed, source s, pass p)``, so every pass has a
  fresh order and holds each of its samples exactly once.  Epoch e takes positions
  ``[e * q_s, (e + 1) * q_s)`` of that stream: a source too small for its share is repeated
  within the epoch, and one too large continues in epoch e + 1 where epoch e stopped.
* **Runs.**  The epoch's sample set is a list of runs ``(block, start, stop)`` in *global* ids:
  source s's blocks and samples follow those of the sources before it (`Sources`).  The runs
  of all sources are interleaved in proportion (each run placed at the middle of its share of
  its source's quota), so any stretch of the epoch holds the sources near their weights.
* **Batches.**  `stratified_counts` gives each batch's samples per source: the floor of
  ``w_s * B`` plus one for the sources whose running total lags its target most, so every
  batch is within one sample of ``w_s * B`` for every source, and running totals stay within
  one of their targets.

Cost: O(S + runs) per epoch for the runs, O(batches * S) for the counts; nothing per sample.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from corgi_io.errors import ArgumentError
from corgi_io.schedule.order import block_order
from corgi_io.schedule.pieces import EMPTY, block_pieces, cut, positions
from corgi_io.schedule.spec import BlockTable

BLEND_PASS = 1 << 20  # the pass number offset that keeps a source's pass orders apart from epoch orders


def check_weights(names, weights) -> np.ndarray:
    """The weights (a mapping name -> weight, or a sequence in the order of `names`) normalised to sum 1, as
    float64 in the order of `names`; ArgumentError for a name given twice, a weight that is missing, negative or
    not finite, a weight for an unknown source, or all zero."""
    names = list(names)
    if len(set(names)) != len(names):
        raise ArgumentError(f"sources {names} name a source twice")
    if not isinstance(weights, Mapping):  # a sequence in the order of `names`
        weights = list(weights)
        if len(weights) != len(names):
            raise ArgumentError(f"{len(weights)} weights for the {len(names)} sources {names}")
        weights = dict(zip(names, weights))
    unknown = sorted(set(weights) - set(names))
    if unknown or set(names) - set(weights):
        raise ArgumentError(f"weights must name exactly the sources {names}; got {sorted(weights)}")
    values = np.array([weights[name] for name in names], dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values < 0) or values.sum() <= 0:
        raise ArgumentError(f"weights must be finite, non-negative and not all zero; got {dict(zip(names, values.tolist()))}")
    return values / values.sum()


def epoch_quotas(weights: np.ndarray, samples_per_epoch: int) -> np.ndarray:
    """Samples each source gives per epoch: the largest-remainder rounding of ``weights * samples_per_epoch``
    (int64, summing to `samples_per_epoch`; ties go to the earlier source)."""
    exact = np.asarray(weights, np.float64) * int(samples_per_epoch)
    quotas = np.floor(exact).astype(np.int64)
    short = int(samples_per_epoch) - int(quotas.sum())
    quotas[np.argsort(-(exact - quotas), kind="stable")[:short]] += 1
    return quotas


@dataclass(frozen=True)
class Sources:
    """The blended sources as one global id space: per source its first global block and first global sample."""

    tables: tuple          # each source's BlockTable (local ids)
    block_base: np.ndarray  # int64 (S + 1,): source s's blocks are [block_base[s], block_base[s + 1])
    sample_base: np.ndarray  # int64 (S + 1,): its samples likewise

    @classmethod
    def of(cls, tables) -> "Sources":
        tables = tuple(tables)
        blocks = np.cumsum([0, *(len(table.count) for table in tables)]).astype(np.int64)
        samples = np.cumsum([0, *(table.num_samples for table in tables)]).astype(np.int64)
        return cls(tables, blocks, samples)

    def source_of_blocks(self, blocks: np.ndarray) -> np.ndarray:
        """The source of each global block id."""
        return np.searchsorted(self.block_base, blocks, side="right") - 1


def pass_runs(table: BlockTable, seed: int, source: int, start: int, stop: int) -> np.ndarray:
    """Positions [start, stop) of source `source`'s pass stream as pieces in its local ids.

    Pass p holds every sample of `table` once, its blocks in the order of ``(seed, BLEND_PASS * (source + 1) +
    p)``; position ``p * N + i`` is the i-th sample of pass p.  O(blocks) per pass touched."""
    total = table.num_samples
    if stop <= start:
        return EMPTY
    if total == 0:
        raise ArgumentError(f"source {source} has no samples to blend")
    parts = [EMPTY]
    for p in range(start // total, -(-stop // total)):
        order = block_order(len(table.count), seed, BLEND_PASS * (source + 1) + p)
        pieces = block_pieces(order, table.first, table.count)
        parts.append(cut(pieces, max(start - p * total, 0), min(stop - p * total, total), positions(pieces)))
    return np.concatenate(parts)


def epoch_runs(sources: Sources, quotas: np.ndarray, seed: int, epoch: int) -> tuple:
    """(runs, source of each run) of epoch `epoch`: runs ``(block, start, stop)`` in global ids, the sources
    interleaved in proportion.  Source s gives positions ``[epoch * q_s, (epoch + 1) * q_s)`` of its passes."""
    runs, owners, keys = [EMPTY], [np.zeros(0, np.int64)], [np.zeros(0)]
    for s, (table, quota) in enumerate(zip(sources.tables, quotas.tolist())):
        local = pass_runs(table, seed, s, epoch * quota, (epoch + 1) * quota)
        counts = local[:, 2] - local[:, 1]
        middle = (np.cumsum(counts) - counts / 2) / max(quota, 1)  # where each run sits in its source's share
        runs.append(local + np.array([sources.block_base[s], sources.sample_base[s], sources.sample_base[s]]))
        owners.append(np.full(len(local), s, np.int64))
        keys.append(middle)
    order = np.argsort(np.concatenate(keys), kind="stable")
    return np.concatenate(runs)[order], np.concatenate(owners)[order]


def stratified_counts(weights: np.ndarray, batch_size: int, batches: int) -> np.ndarray:
    """(batches, S) int64: the samples each batch takes from each source.

    Each row sums to `batch_size`; each entry is ``floor(w_s * B)`` or that plus one (within one sample of
    ``w_s * B``), the extra samples going to the sources whose running totals lag ``w_s * B * (b + 1)`` most
    (ties: the earlier source).  O(batches * S)."""
    weights = np.asarray(weights, np.float64)
    base = np.floor(weights * batch_size).astype(np.int64)
    extra = int(batch_size - base.sum())
    counts = np.empty((batches, len(weights)), np.int64)
    taken = np.zeros(len(weights), np.int64)
    for b in range(batches):
        lag = weights * batch_size * (b + 1) - (taken + base)
        row = base.copy()
        row[np.argsort(-lag, kind="stable")[:extra]] += 1
        counts[b], taken = row, taken + row
    return counts

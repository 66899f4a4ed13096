"""Weighted blending of several packs as pure planning: quotas, passes, the epoch as a virtual pack, batch rows.

A blend reads S packs (sources) with weights w_s.  Its planning needs no I/O and no torch:

* **Quotas.**  An epoch holds `samples_per_epoch` samples; source s gives q_s of them, the
  largest-remainder rounding of ``w_s * samples_per_epoch``, computed exactly (so ``|q_s / N - w_s| < 1 / N``
  and the quotas sum to N).  Weights are normalised by their largest first: extreme finite ones cannot overflow.
  Quotas do not depend on the world size, so an elastic resume keeps every later epoch's samples.
* **Passes (epochized blending).**  Source s is read as an endless stream of passes; pass p is
  its blocks in the block order of ``(seed, BLEND_PASS * (s + 1) + p)``, so every pass has a
  fresh order and holds each of its samples exactly once.  Epoch e takes positions
  ``[e * q_s, (e + 1) * q_s)`` of that stream: a source too small for its share is repeated
  within the epoch, and one too large continues in epoch e + 1 where epoch e stopped.
* **The epoch as a virtual pack** (`BlendEpoch`).  Those positions are runs ``(block, start,
  stop)`` of the source's blocks; each run becomes one *virtual block*, and the epoch's positions
  get *virtual sample ids*, source after source.  A sample repeated within the epoch (two passes)
  has two virtual ids, so the loader's planning, worker split and resume (which count samples by
  id) work on a blend unchanged; the reader maps each virtual piece back to its source.
* **Rows** (`compose_rows`).  Every rank takes the same count from each source; its samples are
  dealt into rows (its batches, or interleaving rows of `SAMPLE_ROW` samples without batches)
  whose per-source counts are within one sample of ``w_s * row`` (deterministic, stratified: the
  extra samples go to the sources whose running totals lag their targets most).

Cost: O(S + runs) per epoch for the virtual pack, O(rows * S) for the rows; nothing per sample.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from corgi_io.errors import ArgumentError
from corgi_io.schedule.epoch_order import block_order
from corgi_io.schedule.pieces import EMPTY, block_pieces, cut, piece_counts, positions
from corgi_io.schedule.spec import BlockTable

BLEND_PASS = 1 << 20  # the pass number offset that keeps a source's pass orders apart from epoch orders
SAMPLE_ROW = 256  # the interleaving rows of a blend read as samples (no batch_size)
MAX_EPOCH_SAMPLES = 1 << 62  # the most samples an epoch may hold: quotas and virtual ids stay int64


def check_weights(names, weights) -> np.ndarray:
    """The weights (a mapping name -> weight, or a sequence in the order of `names`) normalised to sum 1, as
    float64 in the order of `names`; ArgumentError for a name given twice, a weight that is missing, not a number
    (a bool or a string), negative or not finite, a weight for an unknown source, or all zero.

    Each weight is divided by the largest before the sum is taken, so that no finite weights overflow (two of
    1e308 summed to inf, and every weight became 0); a weight below 2**-1074 of the largest becomes 0."""
    names = list(names)
    values = _weight_values(names, weights)
    if not np.all(np.isfinite(values)) or np.any(values < 0) or not np.any(values > 0):
        raise ArgumentError("weights must be finite, non-negative and not all zero; "
                            f"got {dict(zip(names, values.tolist()))}")
    scaled = values / values.max()
    return scaled / scaled.sum()


def _weight_values(names, weights) -> np.ndarray:
    """The weights as float64 in the order of `names` (not yet checked for range); ArgumentError for a name given
    twice, weights that do not name exactly the sources, or a weight that is not a number."""
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
    given = [weights[name] for name in names]
    if any(isinstance(w, bool) or not isinstance(w, numbers.Real) for w in given):
        raise ArgumentError(f"weights must be numbers; got {dict(zip(names, given))}")
    return np.array([_as_float(w) for w in given], dtype=np.float64)


def _as_float(weight) -> float:
    """A real number as a float; one beyond the float range (an int of 400 digits) as an infinity of its sign."""
    try:
        return float(weight)
    except OverflowError:
        return math.inf if weight > 0 else -math.inf


def epoch_quotas(weights: np.ndarray, samples_per_epoch: int) -> np.ndarray:
    """Samples each source gives per epoch (int64, summing to `samples_per_epoch`): the largest-remainder rounding
    of each exact share ``w_s * N / sum(w)``, in exact rational arithmetic (so the bound ``|q_s - share_s| < 1``
    and the sum hold for any N up to MAX_EPOCH_SAMPLES); ties go to the earlier source.  O(S)."""
    n = samples_per_epoch
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 0 <= n <= MAX_EPOCH_SAMPLES:
        raise ArgumentError(f"samples per epoch must be an int in [0, {MAX_EPOCH_SAMPLES}], got {n!r}")
    shares = [Fraction(w) for w in np.asarray(weights, np.float64).tolist()]
    total = sum(shares)
    if not total > 0:
        raise ArgumentError(f"weights must not be all zero; got {np.asarray(weights).tolist()}")
    shares = [share * int(n) / total for share in shares]
    quotas = [math.floor(share) for share in shares]
    short = int(n) - sum(quotas)  # 0 <= short < S: each floor is within one of its share, and the shares sum to N
    for s in sorted(range(len(shares)), key=lambda s: quotas[s] - shares[s])[:short]:  # stable: ties to the earlier
        quotas[s] += 1
    return np.array(quotas, np.int64)


def pass_runs(table: BlockTable, seed: int, source: int, start: int, stop: int,
              shuffle_blocks: bool = True) -> np.ndarray:
    """Positions [start, stop) of source `source`'s pass stream as pieces in its local ids.

    Pass p holds every sample of `table` once, its blocks in the order of ``(seed, BLEND_PASS * (source + 1) +
    p)`` (stored order without `shuffle_blocks`); position ``p * N + i`` is the i-th sample of pass p.
    O(blocks) per pass touched."""
    total = table.num_samples
    if stop <= start:
        return EMPTY
    if total == 0:
        raise ArgumentError(f"source {source} has no samples to blend")
    parts = [EMPTY]
    for p in range(start // total, -(-stop // total)):
        order = block_order(len(table.count), seed, BLEND_PASS * (source + 1) + p, shuffle_blocks)
        pieces = block_pieces(order, table.first, table.count)
        parts.append(cut(pieces, max(start - p * total, 0), min(stop - p * total, total), positions(pieces)))
    return np.concatenate(parts)


class VirtualSizes:
    """The per-sample sizes of a `BlendEpoch`'s virtual ids, read from each source's sizes when sliced or
    indexed (as the planner reads `BlockTable.sizes`): O(k log runs) for k ids."""

    def __init__(self, epoch: "BlendEpoch", tables):
        self.epoch, self.tables = epoch, tables

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.epoch.num_samples), dtype=np.int64)
        ids = np.asarray(key, np.int64)
        source, local = self.epoch.local_ids(ids.ravel())
        out = np.zeros(ids.size, np.int64)
        for s in np.unique(source).tolist():
            mine = source == s
            out[mine] = np.asarray(self.tables[s].sizes[local[mine]], np.int64)
        return out.reshape(ids.shape)


@dataclass(frozen=True, eq=False)
class BlendEpoch:
    """One epoch of a blend as a virtual pack: virtual block i is run ``runs[i]`` (block, start, stop, in the
    local ids of source ``source[i]``), holding virtual ids ``[first[i], first[i] + count[i])``; source s's runs
    are ``[run_base[s], run_base[s + 1])``.  ``table`` is the planner's view (sizes read from the sources)."""

    runs: np.ndarray
    source: np.ndarray
    run_base: np.ndarray
    table: BlockTable

    @classmethod
    def of(cls, tables, quotas, seed: int, epoch: int, shuffle_blocks: bool = True) -> "BlendEpoch":
        """Epoch `epoch` of the sources `tables` (BlockTables with size sums) with per-epoch `quotas`: source s
        gives positions ``[epoch * q_s, (epoch + 1) * q_s)`` of its passes.  O(S + runs)."""
        local = [pass_runs(table, seed, s, epoch * int(q), (epoch + 1) * int(q), shuffle_blocks)
                 for s, (table, q) in enumerate(zip(tables, quotas))]
        runs = np.concatenate([EMPTY, *local])
        source = np.repeat(np.arange(len(local)), [len(r) for r in local]).astype(np.int64)
        run_base = np.cumsum([0, *(len(r) for r in local)]).astype(np.int64)
        count = piece_counts(runs)
        first = np.cumsum(count) - count
        sums = np.concatenate([np.zeros(0, np.int64), *(t.sizes_of(r) for t, r in zip(tables, local) if len(r))]) \
            if all(t.size_sum is not None for t in tables) else None
        blend = cls(runs, source, run_base, BlockTable(first, count, sums))
        object.__setattr__(blend, "table", BlockTable(first, count, sums, VirtualSizes(blend, tables)))
        return blend

    @property
    def num_samples(self) -> int:
        return int(self.table.count.sum())

    def source_runs(self, source: int) -> np.ndarray:
        """Source `source`'s virtual blocks as whole virtual pieces (block, start, stop), in pass order."""
        blocks = np.arange(self.run_base[source], self.run_base[source + 1], dtype=np.int64)
        return block_pieces(blocks, self.table.first, self.table.count)

    def local_ids(self, ids: np.ndarray) -> tuple:
        """(source, id in that source's pack) of each virtual sample id."""
        runs = np.searchsorted(self.table.first, ids, side="right") - 1
        return self.source[runs], self.runs[runs, 1] + (ids - self.table.first[runs])

    def local_piece(self, piece) -> tuple:
        """(source, (block, start, stop) in its pack's ids) of one virtual piece."""
        block, start, stop = (int(v) for v in piece)
        block_, first = self.runs[block, :2].tolist()
        shift = first - int(self.table.first[block])
        return int(self.source[block]), (block_, start + shift, stop + shift)


def row_sizes(samples: int, row: int, drop_last: bool = False) -> np.ndarray:
    """The rows that deal a rank's `samples`: full rows of `row`, then the short rest (none with `drop_last`)."""
    full, rest = divmod(int(samples), int(row))
    return np.array([row] * full + ([rest] if rest and not drop_last else []), np.int64)


def compose_rows(weights: np.ndarray, totals: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """(rows, S) int64: how many samples each row of `sizes` takes from each source.

    Rows sum to `sizes`; columns to the largest-remainder shares of `totals` (the samples a rank holds of each
    source) when `sizes` hold fewer (drop_last), else to `totals`.  Each entry lies within one sample of
    ``weights[s] * size`` where the totals allow it; the units beyond each row's floor go to the sources whose
    running totals lag their (totals-proportional) targets most, so running totals never drift.
    O(rows * S log S)."""
    weights, sizes = np.asarray(weights, np.float64), np.asarray(sizes, np.int64)
    want = int(sizes.sum())
    totals = np.asarray(totals, np.int64)
    if want < totals.sum():
        totals = np.minimum(totals, epoch_quotas(totals / max(totals.sum(), 1), want))
    rows = np.zeros((len(sizes), len(weights)), np.int64)
    taken, placed = np.zeros(len(weights), np.int64), 0
    for b, size in enumerate(sizes.tolist()):
        placed += size
        left = totals - taken
        if b == len(sizes) - 1:
            rows[b] = left
            break
        lag = totals * (placed / max(want, 1)) - taken
        rows[b] = _row(weights * size, lag, left, size)
        taken += rows[b]
    return rows


def _row(ideal: np.ndarray, lag: np.ndarray, left: np.ndarray, size: int) -> np.ndarray:
    """One row of `size`: each source within one of its `ideal` share (where `left` allows), the units above
    the lowest allowed counts to the sources that lag most."""
    low = np.minimum(np.maximum(np.ceil(ideal - 1), 0).astype(np.int64), left)
    high = np.minimum(np.floor(ideal + 1).astype(np.int64), left)
    if low.sum() > size or high.sum() < size:  # the totals force a wider row (only near a remainder's end)
        low, high = np.zeros_like(left), left
    row, units = low.copy(), size - int(low.sum())
    while units > 0:
        room = np.flatnonzero(row < high)
        pick = room[np.argsort(-(lag[room] - row[room]), kind="stable")[:units]]
        row[pick] += 1
        units -= len(pick)
    return row

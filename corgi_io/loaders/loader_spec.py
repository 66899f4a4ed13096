"""The dataset's resolved options: the parts of `loaders/options.py` checked together, once, when a
`CorgiPileDataset` is built, before any read.  A bad combination fails at once with one ArgumentError naming
the parts, not later (or differently) in every DataLoader worker.  What passes becomes the dataset's frozen,
flat `LoaderSpec`, which makes each epoch's planner over the pack's `block_table`."""
from __future__ import annotations

import os
from dataclasses import dataclass

from corgi_io.arguments import check_at_least, check_callable

from corgi_io.errors import ArgumentError
from corgi_io.schedule import BatchBudget, BlockTable, BudgetPlanner, loader_planner
from corgi_io.schedule.token_rows import RowPlanner

from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.options import BATCHINGS, Batches, Blend, Budget, Cache, Decoding, Ranks, Reading, Shuffle, TokenRows

ROW_SHUFFLES = ("corgipile", "block", "none")


@dataclass(frozen=True)
class LoaderSpec:
    """A dataset's parts (`loaders/options.py`) checked together and flattened into the fields the planners,
    readers and resume read (see each part for its meaning); fixed for the dataset's life."""

    shuffle: str
    buffer_blocks: int
    seed: int
    drop_last: bool
    transform: object
    prefetch_blocks: int  # `buffer_blocks` when not given
    balance: str
    batch_size: int | None
    collate_fn: object
    partitions: dict | None
    read_threads: int | None  # reads in flight; None: the storage's (2 local; remote 1, grown to 8)
    storage_options: dict
    verify_reads: bool
    timing: str  # a `corgi_io.timing.TIMINGS` name: what `CorgiPileDataset.stats` keeps
    max_pixels: int | None
    on_error: str
    cache_dir: str | None  # remote pieces kept there (loaders/piece_cache.py); None: no cache
    cache_limit: int | None  # bytes of pieces the cache holds, with cache_dir
    cache_policy: str  # a `schedule.eviction.EVICTIONS` name
    group_by_size: bool  # length-grouped batches (schedule.batches.SizeGrouper) instead of size-balanced ones
    batch_budget: int | None  # batches of cost <= this (schedule.budget), instead of batch_size
    batch_cost: str  # a `schedule.budget.BATCH_COSTS` name: what a batch costs against batch_budget
    rows: TokenRows | None = None  # rows of tokens (batch_size: rows per item); None: samples
    fields: tuple | None = None  # field names to read alone (reading/field_reads.py); None: every field

    def planner(self, manifest, world_size: int, epoch: int, cost_model=None, owner=None):
        """The pure planner of `epoch` of the pack `manifest` for `world_size` ranks with these options
        (`loader_planner`; `cost_model` and `owner` as `plan_epoch` takes them): wrapped in a `BudgetPlanner`
        with `batch_budget`; with `rows`, the `RowPlanner` over the samples' plan (made without batches: the
        batches are of rows)."""
        if self.rows is not None:
            samples = loader_planner(block_table(manifest), world_size, epoch,
                                     **{**self.plan_options, "batch_size": None})
            return RowPlanner(samples, self.rows.options, self.batch_size)
        base = loader_planner(block_table(manifest), world_size, epoch, cost_model=cost_model, owner=owner,
                              **self.plan_options)
        return base if self.batch_budget is None else BudgetPlanner(base, BatchBudget(self.batch_budget,
                                                                                      self.batch_cost))

    @property
    def plan_options(self) -> dict:
        """The options an epoch's plan depends on: the keywords of `loader_planner` and `blend_planner`."""
        return dict(shuffle=self.shuffle, buffer_blocks=self.buffer_blocks, seed=self.seed, balance=self.balance,
                    drop_last=self.drop_last, batch_size=self.batch_size, group_by_size=self.group_by_size)

    def identity(self, pack: str, partitioned: bool) -> dict:
        """What a saved resume state must agree on to resume a dataset of pack fingerprint `pack` with these
        options (the world size and workers may differ)."""
        return {"pack": pack, "seed": self.seed, "shuffle": self.shuffle, "balance": self.balance,
                "drop_last": self.drop_last, "batch_size": self.batch_size, "buffer_blocks": self.buffer_blocks,
                "partitioned": partitioned, **({"group_by_size": True} if self.group_by_size else {}),
                **({"batch_budget": self.batch_budget, "batch_cost": self.batch_cost} if self.batch_budget else {}),
                **({} if self.rows is None else self.rows.identity())}


def block_table(manifest) -> BlockTable:
    """The planner's view of a pack: its block columns and per-sample sizes (the manifest's arrays, none read)."""
    return BlockTable(manifest.blocks.first, manifest.blocks.count, manifest.blocks.size_sum, manifest.samples.size)


def loader_spec(source, *, shuffle: Shuffle, seed, ranks: Ranks, batching, decoding: Decoding, transform,
                reading: Reading, cache: Cache | None) -> LoaderSpec:
    """The one place where the parts are checked against each other (each checked itself when made), then
    flattened into the `LoaderSpec`; ArgumentError names the parts that do not go together."""
    _check_source(source, ranks, batching)
    _check_types(shuffle=(shuffle, Shuffle), ranks=(ranks, Ranks), decode=(decoding, Decoding),
                 reading=(reading, Reading), cache=(cache, (Cache, type(None))),
                 batching=(batching, (*BATCHINGS, type(None))))
    check_callable("transform", transform, optional=True)
    if isinstance(batching, TokenRows):
        _check_rows(shuffle, ranks, decoding, transform, cache, reading)
    elif ranks.balance != "count" and (batching is None or shuffle.mode != "corgipile"):
        raise ArgumentError(f"Ranks(balance={ranks.balance!r}) balances every step's batch inside CorgiPile "
                            "buffers: it needs batching=Batches(...) or Budget(...) and Shuffle('corgipile')")
    if isinstance(batching, Batches) and batching.group_by_size and (shuffle.mode != "corgipile"
                                                                      or ranks.balance != "count"):
        raise ArgumentError("Batches(group_by_size=True) groups each CorgiPile buffer's batches by size: it needs "
                            "Shuffle('corgipile') and Ranks(balance='count')")
    if isinstance(batching, Budget) and (shuffle.mode != "corgipile" or ranks.partitions is not None):
        raise ArgumentError("Budget cuts each CorgiPile buffer into batches: it needs Shuffle('corgipile'), and "
                            "does not combine with Ranks(partitions=)")
    if decoding.on_device and (not isinstance(batching, Batches) or transform is not None
                               or batching.collate_fn is not collate_samples):
        raise ArgumentError("ImageDecoder(device=...) decodes whole batches of raw image bytes in the training "
                            "process: it needs batching=Batches(size) with the default collate_fn, and no transform")
    if decoding.on_error == "skip" and not isinstance(batching, (Batches, Budget)):
        raise ArgumentError("Decoding(on_error='skip') needs batching=Batches(...) or Budget(...): a skipped sample "
                            "leaves its batch one sample shorter, so every rank keeps len(dataset) steps")
    return _flatten(shuffle, check_at_least("seed", seed, 0, optional=False), ranks, batching, decoding, transform, reading, cache)


def _check_source(source, ranks: Ranks, batching) -> None:
    """A pack's path or URL, or a `Blend`, which takes no shard pinning, length grouping, budget or token rows."""
    if isinstance(source, Blend):
        grouped = isinstance(batching, Batches) and batching.group_by_size
        if ranks.partitions is not None or grouped or isinstance(batching, (Budget, TokenRows)):
            raise ArgumentError("Ranks(partitions=) (which pins one pack's shards to ranks), "
                                "Batches(group_by_size=True), Budget and TokenRows do not apply to a Blend")
    elif not isinstance(source, (str, os.PathLike)):
        raise ArgumentError(f"source must be a pack's path or URL, or a Blend({{name: pack}}), got {source!r}")


def _check_types(**parts) -> None:
    """ArgumentError for a part that is not of its kind (a flat keyword where an object belongs, say)."""
    for name, (value, kinds) in parts.items():
        if not isinstance(value, kinds):
            wanted = " or ".join("None" if k is type(None) else k.__name__
                                 for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
            raise ArgumentError(f"{name}= takes {wanted}, got {value!r}")


def _check_rows(shuffle: Shuffle, ranks: Ranks, decoding: Decoding, transform, cache, reading: Reading) -> None:
    """ArgumentError for the parts that rows of tokens (`TokenRows`) do not take."""
    refused = [name for name, bad in (("a transform", transform is not None),
                                      ("Ranks(drop_last=True)", ranks.drop_last),
                                      ("Ranks(partitions=)", ranks.partitions is not None),
                                      ("a Cache", cache is not None),
                                      ("Reading(fields=)", reading.fields is not None),
                                      ("Decoding(on_error='skip')", decoding.on_error != "raise"),
                                      (f"Ranks(balance={ranks.balance!r})", ranks.balance not in ("count", "size")),
                                      (f"Shuffle({shuffle.mode!r})", shuffle.mode not in ROW_SHUFFLES),
                                      (f"decode {decoding.how!r}", decoding.how not in (None, "tokens"))) if bad]
    if refused:
        raise ArgumentError(f"TokenRows packs token rows itself: it does not take {', '.join(refused)} (it takes "
                            f"shuffle modes {ROW_SHUFFLES}, balance 'count' or 'size', and decode None or 'tokens')")


def _flatten(shuffle, seed, ranks, batching, decoding, transform, reading, cache) -> LoaderSpec:
    """The parts as the `LoaderSpec`'s flat fields."""
    batches, budget = isinstance(batching, Batches), isinstance(batching, Budget)
    return LoaderSpec(
        shuffle=shuffle.mode, buffer_blocks=shuffle.buffer_blocks, seed=seed, drop_last=ranks.drop_last,
        transform=transform, balance=ranks.balance, partitions=ranks.partitions,
        prefetch_blocks=shuffle.buffer_blocks if reading.prefetch_blocks is None else reading.prefetch_blocks,
        batch_size=batching.size if batches else batching.batch_size if isinstance(batching, TokenRows) else None,
        collate_fn=batching.collate_fn if batches or budget else collate_samples,
        group_by_size=batches and batching.group_by_size, batch_budget=batching.limit if budget else None,
        batch_cost=batching.cost if budget else "padded", rows=batching if isinstance(batching, TokenRows) else None,
        read_threads=reading.threads, storage_options=reading.storage_options, verify_reads=reading.verify,
        timing=reading.timing, max_pixels=decoding.max_pixels, on_error=decoding.on_error,
        cache_dir=cache and cache.folder, cache_limit=cache and cache.limit,
        cache_policy=cache.policy if cache else "belady", fields=reading.fields)

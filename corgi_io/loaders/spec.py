"""The checks of `CorgiPileDataset`'s arguments, made when it is built, before any read: a bad one fails at
once with an ArgumentError naming it, not later (or differently) in every DataLoader worker.  What passes
becomes the dataset's frozen `LoaderSpec`, which makes each epoch's planner over the pack's `block_table`."""
from __future__ import annotations

import os
from dataclasses import dataclass

from corgi_io.arguments import check_at_least, check_callable, check_flag, check_mapping, choose
from corgi_io.errors import ArgumentError
from corgi_io.schedule import BALANCES, BATCH_COSTS, SHUFFLES, BatchBudget, BlockTable, BudgetPlanner, loader_planner
from corgi_io.schedule.eviction import EVICTIONS
from corgi_io.schedule.token_rows import RowPlanner

from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.on_error import check_on_error
from corgi_io.loaders.token_rows import check_row_options

COUNTS = (("buffer_blocks", 1, False), ("seed", 0, False), ("prefetch_blocks", 0, True), ("batch_size", 1, True),
          ("read_threads", 1, True), ("max_pixels", 1, True),
          ("batch_budget", 1, True))  # (name, least, None allowed); rank: rank_and_world


@dataclass(frozen=True)
class LoaderSpec:
    """A dataset's options once checked and normalised (see `CorgiPileDataset` for each); fixed for its life."""

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
    max_pixels: int | None
    on_error: str
    cache_dir: str | None  # remote pieces kept there (loaders/piece_cache.py); None: no cache
    cache_limit: int | None  # bytes of pieces the cache holds, with cache_dir
    cache_policy: str  # a `schedule.eviction.EVICTIONS` name
    group_by_size: bool  # length-grouped batches (schedule.batches.SizeGrouper) instead of size-balanced ones
    batch_budget: int | None  # batches of cost <= this (schedule.budget), instead of batch_size
    batch_cost: str  # a `schedule.budget.BATCH_COSTS` name: what a batch costs against batch_budget
    rows: object = None  # pack_length=: a `loaders.token_rows.RowSpec` (rows of tokens, batches of rows); None: samples

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


def check_options(**options) -> LoaderSpec:
    """The dataset's keyword arguments (all but source, decode, rank, world_size) checked and normalised:
    counts as ints, flags as bools, storage_options as a dict; ArgumentError names the first bad one."""
    for name, least, optional in COUNTS:
        options[name] = check_at_least(name, options[name], least, optional=optional)
    choose("shuffle", options["shuffle"], SHUFFLES)
    choose("balance", options["balance"], BALANCES)
    for name in ("drop_last", "verify_reads", "group_by_size"):
        options[name] = check_flag(name, options[name])
    check_callable("transform", options["transform"], optional=True)
    check_callable("collate_fn", options["collate_fn"])
    options["storage_options"] = check_mapping("storage_options", options["storage_options"])
    if options["partitions"] is not None:
        check_mapping("partitions", options["partitions"])
    batch_size, balance = options["batch_size"], options["balance"]
    check_budget(options)
    batched = batch_size is not None or options["batch_budget"] is not None
    if not batched and options["collate_fn"] is not collate_samples:
        raise ArgumentError("collate_fn= collates the dataset's batches: it needs batch_size= or batch_budget=")
    if options["rows"] is not None:
        check_row_options(options)
    elif balance != "count" and (not batched or options["shuffle"] != "corgipile"):  # else steps are not balanced
        raise ArgumentError(f"balance={balance!r} balances every step's batch inside CorgiPile buffers: "
                            "it needs batch_size= (or batch_budget=) and shuffle='corgipile'")
    if options["group_by_size"] and (batch_size is None or options["shuffle"] != "corgipile" or balance != "count"):
        raise ArgumentError("group_by_size groups each CorgiPile buffer's batches by size: it needs batch_size=, "
                            "shuffle='corgipile' and balance='count'")
    check_on_error(options["on_error"], batch_size or options["batch_budget"])
    if options["prefetch_blocks"] is None:
        options["prefetch_blocks"] = options["buffer_blocks"]
    check_cache(options)
    return LoaderSpec(**options)


def check_budget(options: dict) -> None:
    """batch_budget (an int >= 1, already checked) instead of batch_size, from CorgiPile buffers of one pack's
    samples; batch_cost a known cost model (`schedule.budget.BATCH_COSTS`)."""
    choose("batch_cost", options["batch_cost"], BATCH_COSTS)
    if options["batch_budget"] is None:
        return
    if options["rows"] is not None:
        raise ArgumentError("batch_budget= cuts batches of samples; pack_length= makes rows of equal tokens, "
                            "each batch_size= rows: give one of them")
    if options["batch_size"] is not None:
        raise ArgumentError("batch_budget= cuts batches of varying sizes within a budget; batch_size= fixes "
                            "their size: give one of them")
    if options["shuffle"] != "corgipile" or options["group_by_size"] or options["partitions"] is not None:
        raise ArgumentError("batch_budget= cuts each CorgiPile buffer into batches: it needs shuffle='corgipile', "
                            "and does not combine with group_by_size= (it groups by size itself) or partitions=")


def check_cache(options: dict) -> None:
    """cache_dir as a str (or None), cache_limit an int >= 1 exactly when there is a cache_dir, a known policy."""
    choose("cache_policy", options["cache_policy"], EVICTIONS)
    if options["cache_dir"] is None:
        if options["cache_limit"] is not None:
            raise ArgumentError("cache_limit= bounds the cache of cache_dir=: give both, or neither")
        return
    if not isinstance(options["cache_dir"], (str, os.PathLike)):
        raise ArgumentError(f"cache_dir must be a path, got {options['cache_dir']!r}")
    options["cache_dir"] = os.fspath(options["cache_dir"])
    options["cache_limit"] = check_at_least("cache_limit", options["cache_limit"], 1, optional=False)

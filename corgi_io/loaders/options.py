"""The checks of `CorgiPileDataset`'s arguments, made when it is built, before any read: a bad one fails at
once with an ArgumentError naming it, not later (or differently) in every DataLoader worker."""
from __future__ import annotations

from corgi_io.arguments import check_at_least, check_callable, check_flag, check_mapping, choose
from corgi_io.errors import ArgumentError
from corgi_io.schedule.modes import BALANCES, SHUFFLES

from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.on_error import check_on_error

COUNTS = (("buffer_blocks", 1, False), ("seed", 0, False), ("prefetch_blocks", 0, True), ("batch_size", 1, True),
          ("read_threads", 1, True), ("max_pixels", 1, True))  # (name, least, None allowed); rank: rank_and_world


def check_options(**options) -> dict:
    """The dataset's keyword arguments (all but source, decode, rank, world_size) checked and normalised:
    counts as ints, flags as bools, storage_options as a dict; ArgumentError names the first bad one."""
    for name, least, optional in COUNTS:
        options[name] = check_at_least(name, options[name], least, optional=optional)
    choose("shuffle", options["shuffle"], SHUFFLES)
    choose("balance", options["balance"], BALANCES)
    for name in ("drop_last", "verify_reads"):
        options[name] = check_flag(name, options[name])
    check_callable("transform", options["transform"], optional=True)
    check_callable("collate_fn", options["collate_fn"])
    options["storage_options"] = check_mapping("storage_options", options["storage_options"])
    if options["partitions"] is not None:
        check_mapping("partitions", options["partitions"])
    batch_size, balance = options["batch_size"], options["balance"]
    if batch_size is None and options["collate_fn"] is not collate_samples:
        raise ArgumentError("collate_fn= collates the dataset's batches: it needs batch_size=")
    if balance != "count" and (batch_size is None or options["shuffle"] != "corgipile"):  # else steps are not balanced
        raise ArgumentError(f"balance={balance!r} balances every step's batch inside CorgiPile buffers: "
                            "it needs batch_size= and shuffle='corgipile'")
    check_on_error(options["on_error"], batch_size)
    return options

"""`corgi profile PACK`: the real loader run for a few batches against a simulated training step, and where its
time went, stage by stage (table, JSON, or a timeline PNG)."""
from __future__ import annotations

import json

import click

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.sizes import byte_size
from corgi_io.cli.storage_options import with_storage_options
from corgi_io.schedule.eviction import EVICTIONS
from corgi_io.schedule.modes import BALANCES, SHUFFLES

STATIC_BALANCES = [name for name, mode in BALANCES.items() if not mode.measured_cost]  # nothing observed here


@click.command("profile")
@click.argument("pack")
@click.option("--world-size", type=int, default=1, show_default=True, help="Ranks that share the epoch.")
@click.option("--rank", type=int, default=0, show_default=True, help="The rank profiled.")
@click.option("--workers", type=int, default=0, show_default=True, help="DataLoader workers of the rank.")
@click.option("--batch-size", type=int, help="Samples per batch (Batches(B)); without it each item is a sample.")
@click.option("--buffer-blocks", type=int, default=16, show_default=True, help="Blocks per shuffle buffer.")
@click.option("--shuffle", type=click.Choice(list(SHUFFLES)), default="corgipile", show_default=True)
@click.option("--balance", type=click.Choice(STATIC_BALANCES), default="count", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epoch", type=int, default=0, show_default=True, help="The epoch read.")
@click.option("--decode", metavar="NAME", help="What samples decode to: rgb, pil, text, tokens, video, auto, or "
              "image (ImageDecoder: a random resized crop of --image-size, flipped). Default: raw bytes.")
@click.option("--image-size", type=int, default=224, show_default=True, help="The side of --decode image's crops.")
@click.option("--read-threads", type=int, help="Reads in flight per worker (Reading(threads)).")
@click.option("--prefetch-blocks", type=int, help="Pieces read ahead of the buffer (Reading(prefetch_blocks)).")
@click.option("--no-verify", is_flag=True, help="Skip the checksums (Reading(verify=False)).")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Cache remote pieces in this folder.")
@click.option("--cache-limit", metavar="SIZE", callback=byte_size, help="The cache's bytes (512MiB, 2g...).")
@click.option("--cache-policy", type=click.Choice(list(EVICTIONS)), default="belady", show_default=True)
@with_storage_options
@click.option("--step-ms", type=float, default=0.0, show_default=True,
              help="The simulated training step: milliseconds slept per batch.")
@click.option("--batches", type=int, default=50, show_default=True, help="Batches read (fewer if the epoch ends).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of the table.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw a timeline per worker to this PNG.")
def profile_command(pack, world_size, rank, workers, batch_size, buffer_blocks, shuffle, balance, seed, epoch,
                    decode, image_size, read_threads, prefetch_blocks, no_verify, cache_dir, cache_limit,
                    cache_policy, storage_options, step_ms, batches, as_json, plot):
    """Read PACK with the real loader for --batches batches, sleeping --step-ms per batch as a training step,
    and show where the time went: per stage its seconds on the critical path, its totals, its rate, and the
    verdict (the loader keeps up, or the loop is data-bound and by which stage)."""
    from corgi_io.report.profile import plot_timeline, render, summarize

    if cache_dir is None and cache_limit is not None:
        raise click.BadParameter("a cache's limit needs its folder: give --cache-dir", param_hint="--cache-limit")
    with one_line_errors():
        from corgi_io.loaders import Batches, Cache, Ranks, Reading, Shuffle
        from corgi_io.loaders.profile_run import decoder, profile_loader

        parts = {"shuffle": Shuffle(shuffle, buffer_blocks), "seed": seed, "decode": decoder(decode, image_size),
                 "ranks": Ranks(balance=balance, rank=rank, world_size=world_size),
                 "batching": None if batch_size is None else Batches(batch_size),
                 "reading": Reading(read_threads, prefetch_blocks, not no_verify, storage_options, timing="trace"),
                 "cache": None if cache_dir is None else Cache(cache_dir, cache_limit, cache_policy)}
        run = profile_loader(pack, workers=workers, batches=batches, step_ms=step_ms, epoch=epoch, **parts)
        summary = summarize(run)
        if plot:
            try:
                plot_timeline(run["events"], plot)
            except RuntimeError as exc:
                raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(summary, indent=1) if as_json else render(summary))
    if plot:  # on stderr under --json, so stdout stays one JSON document
        click.echo(f"wrote the timeline per worker to {plot}", err=as_json)

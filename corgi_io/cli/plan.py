"""`corgi plan DATASET --world-size W`: how one epoch splits over ranks, and what that costs per step; with
`--simulate`, what a run of it costs on a given link, cache and decoder (`report.plan.price_run`)."""
from __future__ import annotations

import functools
import json

import click
from click.core import ParameterSource

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.sizes import byte_size
from corgi_io.cli.storage_options import with_storage_options
from corgi_io.schedule.modes import BALANCES

STATIC_BALANCES = [name for name, mode in BALANCES.items() if not mode.measured_cost]  # no speeds to measure here
LOCAL_READS, REMOTE_READS = 2, 8  # reads in flight by default: local storage's, and the most a remote one grows to


SIMULATE_OPTIONS = [  # (name, click.option): what `--simulate` prices a run on; refused without it
    ("bandwidth", click.option(
        "--bandwidth", metavar="RATE", callback=byte_size,
        help="With --simulate: a rank's link to the pack, shared by its workers, such as 100MB/s (binary "
             "multiples). Default: no limit.")),
    ("latency_ms", click.option(
        "--latency-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
        help="With --simulate: milliseconds before each read's first byte.")),
    ("read_threads", click.option(
        "--read-threads", type=click.IntRange(min=1),
        help=f"With --simulate: reads in flight per worker (Reading(threads)). Default: {LOCAL_READS} for a "
             f"local pack, {REMOTE_READS} for a URL (the most the loader grows to).")),
    ("decode_ms", click.option(
        "--decode-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
        help="With --simulate: CPU milliseconds per sample in a worker (decode and transform), as `corgi "
             "profile` measures it.")),
    ("decode_ms_per_mb", click.option(
        "--decode-ms-per-mb", type=click.FloatRange(min=0), default=0.0, show_default=True,
        help="With --simulate: CPU milliseconds per MB (10^6 bytes) read: checksums, split, decode by size.")),
    ("start_ms", click.option(
        "--start-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
        help="With --simulate: milliseconds before each worker's first read, every epoch (a DataLoader worker "
             "process's start).")),
    ("cores", click.option(
        "--cores", type=click.IntRange(min=1),
        help="With --simulate: CPU cores a rank's workers share. Default: one per worker.")),
    ("cache_bytes", click.option(
        "--cache-bytes", metavar="SIZE", callback=byte_size,
        help="With --simulate: a rank's cache of remote pieces (Cache(folder, limit)), such as 200GiB. "
             "Default: none.")),
    ("epochs", click.option(
        "--epochs", type=click.IntRange(min=1),
        help="With --simulate: epochs priced, from --epoch. Default: 2 with --cache-bytes (the first, then "
             "one with the cache as the first left it), else 1.")),
]


def with_simulate_options(command):
    """Decorator: `--simulate` and `SIMULATE_OPTIONS`; the command receives `simulate`: None, or the options as
    a dict.  One of those options without --simulate is a usage error."""
    @functools.wraps(command)
    @click.pass_context
    def run(ctx, *args, simulate, **kwargs):
        given = {name: kwargs.pop(name) for name, _ in SIMULATE_OPTIONS}
        stray = [name for name in given if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
        if stray and not simulate:
            raise click.UsageError(f"--{stray[0].replace('_', '-')} prices a run: it needs --simulate")
        return command(*args, simulate=given if simulate else None, **kwargs)

    for _, option in reversed(SIMULATE_OPTIONS):
        run = option(run)
    return click.option("--simulate", is_flag=True,
                        help="Also price a run of the plan: epoch wall time, remote bytes, cache hits and the "
                             "memory bound, on the machine the options below describe.")(run)


@click.command("plan")
@click.argument("datasets", metavar="DATASET...", nargs=-1, required=True)
@click.option("--weights", metavar="W,W,...",
              help="With several DATASETs: their blending weights, in order (default: equal). Shows, per source, "
                   "its samples, its quota of the epoch, the passes that quota takes, and its share of samples "
                   "and of sizes.")
@click.option("--samples-per-epoch", type=click.IntRange(min=1),
              help="With several DATASETs: the blended epoch's samples (default: all their samples together).")
@click.option("--world-size", type=int, required=True, help="Number of ranks (processes) that share the epoch.")
@click.option("--workers", type=int, default=0, show_default=True, help="DataLoader workers per rank.")
@click.option("--balance", type=click.Choice(STATIC_BALANCES), default="count", show_default=True,
              help="Equal sample counts only, or equal counts and equal size sums.")
@click.option("--batch-size", type=int, help="Per-rank batch size: also simulate the synchronous steps.")
@click.option("--epoch", type=int, default=0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--drop-last", is_flag=True, help="Drop the tail instead of padding to equal counts.")
@click.option("--buffer-blocks", type=int, default=16, show_default=True, help="Blocks per shuffle buffer.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@with_storage_options
@with_simulate_options
def plan_command(datasets, weights, samples_per_epoch, world_size, workers, balance, batch_size, epoch, seed,
                 drop_last, buffer_blocks, as_json, storage_options, simulate):
    """Show per-rank samples, size sums and reads of one epoch of DATASET and, with --batch-size,
    the per-step imbalance and simulated epoch time against count balance.  With several DATASETs,
    show how one epoch of their weighted blend draws on each.  With --simulate, also price a run of
    DATASET: each epoch's wall time, remote bytes and cache hit rate, and the memory bound."""
    from corgi_io.manifest import open_manifest
    from corgi_io.report.plan import check_options, render, render_run, summarize

    if len(datasets) > 1 or weights or samples_per_epoch:
        if simulate is not None:
            raise click.UsageError("--simulate prices one DATASET, not a blend")
        _plan_blend(datasets, weights, samples_per_epoch, world_size, epoch, seed, as_json, storage_options)
        return
    dataset = datasets[0]

    try:
        check_options(world_size=world_size, workers=workers, batch_size=batch_size, buffer_blocks=buffer_blocks,
                      epoch=epoch, seed=seed)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    with one_line_errors():
        m = open_manifest(dataset, storage_options)
        options = dict(workers=workers, balance=balance, batch_size=batch_size, epoch=epoch, seed=seed,
                       drop_last=drop_last, buffer_blocks=buffer_blocks)
        summary = summarize(m.blocks.first, m.blocks.count, m.samples.size, world_size, **options)
        run = None if simulate is None else _price(m, dataset, simulate, world_size, options)
    if as_json:
        click.echo(json.dumps({"dataset": dataset, **summary, **({"simulation": run} if run else {})}, indent=1))
    else:
        click.echo(render(summary) + ("" if run is None else "\n\n" + render_run(run)))


def _price(m, dataset: str, simulate: dict, world_size: int, options: dict) -> dict:
    """`price_run` of manifest `m` with the --simulate options (ArgumentError for a bad combination)."""
    from corgi_io.report.plan import price_run
    from corgi_io.schedule.run_model import RunModel

    remote = "://" in dataset and not dataset.startswith("file://")
    s = simulate
    model = RunModel(bandwidth=float("inf") if s["bandwidth"] is None else float(s["bandwidth"]),
                     latency=s["latency_ms"] / 1e3, decode=s["decode_ms"] / 1e3,
                     in_flight=s["read_threads"] or (REMOTE_READS if remote else LOCAL_READS),
                     decode_per_byte=s["decode_ms_per_mb"] / 1e9, cores=s["cores"], start=s["start_ms"] / 1e3,
                     cache_bytes=s["cache_bytes"] or 0)
    epochs = s["epochs"] or (2 if model.cache_bytes else 1)
    return price_run(m.blocks, m.samples, model, world_size=world_size, epochs=epochs, **options)


def _plan_blend(datasets, weights, samples_per_epoch, world_size, epoch, seed, as_json, storage_options) -> None:
    """`corgi plan A B --weights ...`: the blend table (report/blend.py)."""
    from corgi_io.manifest import open_manifest
    from corgi_io.report.blend import render_blend, summarize_blend, tables_of

    with one_line_errors():
        values = [1.0] * len(datasets) if not weights else [_weight(text) for text in weights.split(",")]
        manifests = [open_manifest(dataset, storage_options) for dataset in datasets]
        summary = summarize_blend(list(datasets), tables_of(manifests), values, samples_per_epoch=samples_per_epoch,
                                  world_size=world_size, epoch=epoch, seed=seed)
    click.echo(json.dumps(summary, indent=1) if as_json else render_blend(summary))


def _weight(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number", param_hint="--weights") from None

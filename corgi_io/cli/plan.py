"""`corgi plan DATASET --world-size W`: how one epoch splits over ranks, and what that costs per step."""
from __future__ import annotations

import json

import click

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.storage_options import with_storage_options
from corgi_io.schedule.modes import BALANCES

STATIC_BALANCES = [name for name, mode in BALANCES.items() if not mode.measured_cost]  # no speeds to measure here


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
def plan_command(datasets, weights, samples_per_epoch, world_size, workers, balance, batch_size, epoch, seed,
                 drop_last, buffer_blocks, as_json, storage_options):
    """Show per-rank samples, size sums and reads of one epoch of DATASET and, with --batch-size,
    the per-step imbalance and simulated epoch time against count balance.  With several DATASETs,
    show how one epoch of their weighted blend draws on each."""
    from corgi_io.manifest import open_manifest
    from corgi_io.report.plan import check_options, render, summarize

    if len(datasets) > 1 or weights or samples_per_epoch:
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
        summary = summarize(m.blocks.first, m.blocks.count, m.samples.size, world_size, workers=workers,
                            balance=balance, batch_size=batch_size, epoch=epoch, seed=seed, drop_last=drop_last,
                            buffer_blocks=buffer_blocks)
    click.echo(json.dumps({"dataset": dataset, **summary}, indent=1) if as_json else render(summary))


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

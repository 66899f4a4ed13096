"""`corgi stats DATASET`: what a pack holds, as text, JSON or a PNG histogram."""
from __future__ import annotations

import json

import click

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.storage_options import with_storage_options


@click.command("stats")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also write a histogram figure to this PNG.")
@with_storage_options
def stats_command(dataset, as_json, plot, storage_options):
    """Show counts, size distributions and block/shard balance of DATASET.

    \b
    Everything comes from the manifest alone: no shard is read, so a missing
    or damaged shard goes unnoticed here (and the exit status stays 0).
    `corgi verify DATASET` is the command that checks the shards.
    """
    from corgi_io.manifest import open_manifest
    from corgi_io.report.stats import render, summarize
    from corgi_io.report.plot import plot as plot_sizes

    with one_line_errors():
        manifest = open_manifest(dataset, storage_options)
        summary = summarize(manifest)
        if plot:
            try:
                plot_sizes(manifest, plot)
            except RuntimeError as exc:
                raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(summary, indent=1) if as_json else render(summary))
    if plot:  # on stderr under --json, so stdout stays one JSON document
        click.echo(f"wrote the size histogram and block size sums to {plot}", err=as_json)

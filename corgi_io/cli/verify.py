"""`corgi verify DATASET`: exit 0 when every shard matches its manifest, else list the problems and exit 1."""
from __future__ import annotations

import json

import click

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.storage_options import with_storage_options


@click.command("verify")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON: ok, samples_checked, "
                                                     "total_problems and the listed problems.")
@click.option("--max-errors", default=20, show_default=True, type=click.IntRange(min=0),
              help="List at most this many problems (all are counted).")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Check this many shards at once, in separate processes.")
@click.option("--max-pixels", type=click.IntRange(min=1), metavar="N",
              help="Also report each image sample recorded with more than N pixels (w*h from its header at pack time).")
@with_storage_options
def verify_command(dataset, as_json, max_errors, jobs, max_pixels, storage_options):
    """Re-read every shard of DATASET and check sizes, checksums, framing and index sidecars."""
    from corgi_io.report.stats import counted
    from corgi_io.report.verify import verify

    with one_line_errors():
        report = verify(dataset, max_errors=max_errors, jobs=jobs, max_pixels=max_pixels,
                        storage_options=storage_options)
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    elif report.ok:
        click.echo(f"ok: {counted(report.samples_checked, 'sample')} intact")
    else:
        for problem in report.problems:
            click.echo(f"corgi verify: {problem}", err=True)
        unlisted = report.total_problems - len(report.problems)
        more = f", {unlisted:,} not listed (--max-errors {max_errors})" if unlisted else ""
        click.echo(f"corgi verify: {counted(report.total_problems, 'problem')}{more}; "
                   f"{counted(report.samples_checked, 'sample')} checked", err=True)
    if not report.ok:
        raise SystemExit(1)

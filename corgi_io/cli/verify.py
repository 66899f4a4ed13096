"""`corgi verify DATASET`: exit 0 when every shard matches its manifest, else name the first problem."""
from __future__ import annotations

import json

import click

from corgi_io.cli.errors import one_line_errors


@click.command("verify")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify_command(dataset, as_json):
    """Re-read every shard of DATASET and check framing, checksums and manifest ranges."""
    from corgi_io.verify import verify

    with one_line_errors():
        checked, problem = verify(dataset)
    if as_json:
        click.echo(json.dumps({"ok": problem is None, "samples_checked": checked,
                               "problem": None if problem is None else vars(problem)}))
    elif problem is None:
        click.echo(f"ok: {checked:,} samples intact")
    if problem is not None:
        if not as_json:
            click.echo(f"corgi verify: {problem}", err=True)
        raise SystemExit(1)

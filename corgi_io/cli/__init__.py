"""The `corgi` command: a click group whose subcommands parse options, call the library and render.

Library errors that mean "bad input" become a one-line message and exit status 1;
anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import click

from corgi_io.cli.pack import pack_command
from corgi_io.cli.plan import plan_command
from corgi_io.cli.stats import stats_command
from corgi_io.cli.verify import verify_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corgi-io")
def main():
    """corgi-io: block-structured shards, CorgiPile shuffling and size-balanced loading."""


main.add_command(pack_command)
main.add_command(plan_command)
main.add_command(stats_command)
main.add_command(verify_command)

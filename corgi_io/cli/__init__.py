"""The `corgi` command: a click group whose subcommands parse options, call the library and render.

Library errors that mean "bad input" become a one-line message and exit status 1;
anything else is a bug and keeps its traceback.

A subcommand's module is imported only when that subcommand runs (or shows its own help), so
`corgi --help` loads click and nothing heavy; the group lists the one-line summaries below.
"""
from __future__ import annotations

import importlib

import click

SUBCOMMANDS = {  # name -> (module, click command in it, the summary `corgi --help` shows)
    "index": ("corgi_io.cli.index", "index_command",
              "Write other readers' index files (wids, DALI, Energon) beside a WebDataset pack."),
    "pack": ("corgi_io.cli.pack", "pack_command", "Pack a folder tree or a listing into shards and a manifest."),
    "plan": ("corgi_io.cli.plan", "plan_command", "Show how one epoch splits over ranks and what its steps cost."),
    "profile": ("corgi_io.cli.profile", "profile_command",
                "Run the loader for a few batches and show where its time goes, stage by stage."),
    "stats": ("corgi_io.cli.stats", "stats_command", "Show counts, size distributions and block/shard balance."),
    "verify": ("corgi_io.cli.verify", "verify_command", "Re-read every shard and check it against the manifest."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use."""

    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module, attribute, _ = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attribute)

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corgi-io")
def main():
    """corgi-io: block-structured shards, CorgiPile shuffling and size-balanced loading."""

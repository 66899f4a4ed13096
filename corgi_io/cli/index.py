"""`corgi index PACK --for wids,dali`: the index files other readers' own tools would write, beside the pack."""
from __future__ import annotations

import warnings

import click

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.storage_options import with_storage_options
from corgi_io.indexes import INDEXES

READERS_HELP = (f"The readers to write index files for, joined by commas: {', '.join(INDEXES)}. wids: shardindex.json "
                f"(wids.ShardListDataset); dali: a .idx per shard (fn.readers.webdataset's index_paths); energon: "
                f".nv-meta/ and a .tar.idx per shard (what energon prepare writes; dataset.yaml, when absent, "
                f"CrudeWebdataset). WebDataset packs, in a local folder or S3.")


def index_names(ctx, param, value) -> tuple:
    """click callback: 'wids,dali' -> ('wids', 'dali'); a usage error naming the choices otherwise; () when absent."""
    if value is None:
        return ()
    from corgi_io.indexes import parse_indexes

    try:
        return parse_indexes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def write_and_report(command: str, pack, names: tuple, storage_options: dict, where: str) -> None:
    """Write the index files `names` beside `pack` (a path or Manifest named `where`) and say what was written, a
    line per reader; a warning of the library's (a key DALI cannot name) is one line on stderr."""
    from corgi_io.indexes import write_indexes
    from corgi_io.report.stats import counted

    with one_line_errors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = write_indexes(pack, names, storage_options)
    for warning in caught:
        click.echo(f"corgi {command}: warning: {warning.message}", err=True)
    for name, paths in written.items():
        more = f", ... {paths[-1]}" if len(paths) > 1 else ""
        click.echo(f"{name}: wrote {counted(len(paths), 'file')} in {where} ({paths[0]}{more})")


@click.command("index")
@click.argument("dataset")
@click.option("--for", "readers", required=True, metavar="READER,...", callback=index_names, help=READERS_HELP)
@with_storage_options
def index_command(dataset, readers, storage_options):
    """Write the index files that other readers' own tools would write (wids' shard list, DALI's wds2idx
    .idx files, Energon's prepared dataset) beside the WebDataset pack DATASET, from its manifest: no
    separate indexing pass over the shards.

    \b
    A pack made before manifest version 6 records no per-field ranges: DALI's and
    Energon's indexes then read the tar headers of each block (one ranged read per block).
    """
    write_and_report("index", dataset, readers, storage_options, dataset)

"""Byte sizes and rates on the command line: one click callback for every command's SIZE and RATE options."""
from __future__ import annotations

import click


def byte_size(ctx, param, value):
    """A SIZE ('512MiB', '4G', '1000') or, for an option whose metavar is RATE, a rate above 0 ('100MB/s',
    '1GiB/s') -> bytes (`corgi pack`'s parser, binary multiples, imported when used, so that a command's
    --help loads nothing heavy); None when the option is not given."""
    from corgi_io.cli.pack import parse_bytes

    if value is None:
        return None
    rate = param.metavar == "RATE"
    try:
        nbytes = parse_bytes(value[:-2] if rate and value.lower().endswith("/s") else value)
    except click.BadParameter:
        nbytes = None
    if nbytes is None or (rate and nbytes == 0):
        example = "a rate above 0 such as 100MB/s or 1GiB/s" if rate else "a size such as 512MiB or 4G"
        raise click.BadParameter(f"{value!r} is not {example}", ctx, param)
    return nbytes

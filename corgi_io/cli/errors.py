"""Turning expected failures into one-line messages with a non-zero exit."""
from __future__ import annotations

import contextlib

import click

from corgi_io.errors import CorgiError


@contextlib.contextmanager
def one_line_errors():
    """Report a CorgiError, or an OSError that names its file, as `Error: ...` and exit 1.

    Anything else is a bug in corgi-io and keeps its traceback.
    """
    try:
        yield
    except CorgiError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        if exc.filename is None:
            raise
        raise click.ClickException(f"{exc.filename}: {exc.strerror or exc}") from None

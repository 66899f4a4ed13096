"""Turning expected failures into one-line messages with a non-zero exit."""
from __future__ import annotations

import contextlib

import click

from corgi_io.corpus import CorpusError
from corgi_io.manifest import ManifestError
from corgi_io.pack import PackError
from corgi_io.storage import StorageError

EXPECTED = (CorpusError, ManifestError, PackError, StorageError, ValueError)


@contextlib.contextmanager
def one_line_errors():
    """Report expected errors as `corgi: error: ...` and exit 1."""
    try:
        yield
    except EXPECTED as exc:
        raise click.ClickException(str(exc)) from None

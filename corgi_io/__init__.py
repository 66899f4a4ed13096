"""corgi-io: block-structured shards, CorgiPile shuffling and size-balanced loading for PyTorch.

The torch-free public face; the loaders live in `corgi_io.loaders` (the only part that imports torch).

    from corgi_io import pack, PackOptions, open_manifest, verify
    manifest = pack("raw/", "packed/", PackOptions(format="wds"), workers=8)
    manifest = open_manifest("packed/")      # or an http://, hdfs://, s3:// URL

The errors are imported at once (they are cheap); everything else on first use (PEP 562), so
`import corgi_io` and `corgi --help` load neither numpy nor any storage library.
"""
from __future__ import annotations

import importlib

from corgi_io.errors import (ArgumentError, BadInput, BatchError, CorgiError, CorpusError, CorruptDataError,
                             DecodeError, FormatError, ManifestError, PackError, ResumeError, StorageError)

_LAZY = {"Manifest": "corgi_io.manifest", "open_manifest": "corgi_io.manifest", "PackOptions": "corgi_io.packing",
         "pack": "corgi_io.packing", "verify": "corgi_io.report.verify"}

__all__ = ["ArgumentError", "BadInput", "BatchError", "CorgiError", "CorpusError", "CorruptDataError", "DecodeError",
           "FormatError", "ManifestError", "PackError", "ResumeError", "StorageError", *_LAZY]
__version__ = "0.1.0"


def __getattr__(name: str):
    """Import a public name's module when the name is first used."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})

"""corgi-io: block-structured shards, CorgiPile shuffling and size-balanced loading for PyTorch.

The torch-free public face; the loaders live in `corgi_io.loaders` (the only part that imports torch).

    from corgi_io import pack, PackOptions, open_manifest, verify
    manifest = pack("raw/", "packed/", PackOptions(format="wds"), workers=8)
    manifest = open_manifest("packed/")      # or an http://, hdfs://, s3:// URL
"""
from corgi_io.errors import (BadInput, BatchError, CorgiError, CorpusError, CorruptDataError, FormatError,
                             ManifestError, PackError, ResumeError, StorageError)
from corgi_io.manifest import Manifest, open_manifest
from corgi_io.packing import PackOptions, pack
from corgi_io.verify import verify

__all__ = ["BadInput", "BatchError", "CorgiError", "CorpusError", "CorruptDataError", "FormatError", "Manifest",
           "ManifestError", "PackError", "PackOptions", "ResumeError", "StorageError", "open_manifest", "pack",
           "verify"]
__version__ = "0.1.0"

"""The manifest: the contract between `corgi pack` and everything that reads a pack.

One module per part of the contract:

* `schema`   - the file names and the column schema (dtypes) of a pack;
* `reader`   - `open_manifest` and the `Manifest` it returns (local packs memory-mapped, remote ones range-read);
* `writer`   - `save_manifest`: columns first, the head last, each atomically;
* `checks`   - validation of an untrusted head and its tables;
* `tables`   - the column and shard tables a `Manifest` holds;
* `columns`, `ranged` - .npy column files, mapped locally or read in ranges remotely;
* `checksum` - the record checksums (CRC32C) that pack writes and readers check;
* `field_ranges` - each field's place in its shard and its own checksum (version 6 on), for readers of some
  fields and index files for other loaders;
* `names`    - the rule for keys and shard paths;
* `fields`   - the field vocabulary: field names, their kinds (`KINDS`) and the default primary.

The names below are the public face; `from corgi_io.manifest import open_manifest` keeps working.
"""
from __future__ import annotations

from corgi_io.errors import ManifestError
from corgi_io.manifest.checks import FORMATS
from corgi_io.manifest.fields import KINDS
from corgi_io.manifest.reader import Manifest, open_manifest
from corgi_io.manifest.schema import (BLOCK_COLUMNS, COLUMNS_DIR, DEFAULT_MAX_PIXELS, DUPLICATE_REASON, ENERGON_META, HEAD_NAME, INDEX_FILES,
                                      MANIFEST_VERSION, PACK_METADATA, SAMPLE_COLUMNS, WIDS_INDEX_NAME, column_path, column_schema)
from corgi_io.manifest.writer import save_column, save_head, save_manifest

__all__ = ["BLOCK_COLUMNS", "COLUMNS_DIR", "DEFAULT_MAX_PIXELS", "DUPLICATE_REASON", "ENERGON_META", "FORMATS", "HEAD_NAME", "INDEX_FILES", "KINDS", "MANIFEST_VERSION", "Manifest",
           "ManifestError", "PACK_METADATA", "SAMPLE_COLUMNS", "WIDS_INDEX_NAME", "column_path", "column_schema", "open_manifest",
           "save_column", "save_head", "save_manifest"]

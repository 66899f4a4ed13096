"""The manifest's names and column schema: which files a pack holds beside its shards, and each column's dtype."""
from __future__ import annotations

import numpy as np



MANIFEST_VERSION = 2
HEAD_NAME = "manifest.json"
COLUMNS_DIR = "columns"
V1_COLUMNS_NAME = "manifest.npz"
PACK_METADATA = (HEAD_NAME, COLUMNS_DIR, V1_COLUMNS_NAME)  # everything in OUTPUT that is not a shard

SAMPLE_COLUMNS = {
    "label": np.int32,        # class id into the head's labels, -1 when unlabeled
    "kind": np.uint8,         # index into KINDS
    "ext": np.uint16,         # index into the head's extensions (the original file's, lower case)
    "bytes": np.int64,        # payload bytes (the original file, unchanged)
    "size": np.int64,         # work units: pixels, frames, tokens or a custom size
    "shard": np.int32,        # index into head["shards"]
    "offset": np.int64,       # record start in the shard (tar headers / TFRecord framing included)
    "length": np.int64,       # record length
    "data_offset": np.int64,  # payload start in the shard
    "checksum": np.uint32,    # head["checksum"] of the record bytes, checked by the loader and `corgi verify`
}
BLOCK_COLUMNS = {
    "shard": np.int32,
    "offset": np.int64,
    "length": np.int64,
    "first": np.int64,        # first sample index (global)
    "count": np.int64,
    "size_sum": np.int64,
}
KEY_COLUMNS = {"key_blob": np.uint8, "key_offsets": np.int64}
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS, its decompression-bomb limit: the most pixels
                                 # an image may have in `corgi pack` and in the loader's image decoders
ROWS_AT_ONCE = 1 << 20  # rows validated in one vectorised step: bounds the temporaries of a full validation


def column_path(name: str) -> str:
    """Path of column `name` (e.g. "sample_size") relative to the pack root."""
    return f"{COLUMNS_DIR}/{name}.npy"


def column_schema() -> dict:
    """{column file name: dtype} of every column of the current version."""
    return {**{f"sample_{n}": t for n, t in SAMPLE_COLUMNS.items()},
            **{f"block_{n}": t for n, t in BLOCK_COLUMNS.items()}, **KEY_COLUMNS}


def declared_rows(counts: dict) -> dict:
    """{column file name: rows} that a version-2 head's counts declare."""
    rows = {"key_blob": counts["key_bytes"], "key_offsets": counts["samples"] + 1}
    rows.update({f"sample_{n}": counts["samples"] for n in SAMPLE_COLUMNS})
    rows.update({f"block_{n}": counts["blocks"] for n in BLOCK_COLUMNS})
    return rows

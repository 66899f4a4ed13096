"""The manifest's names and column schema: which files a pack holds beside its shards, and each column's dtype."""
from __future__ import annotations

import numpy as np



MANIFEST_VERSION = 6  # 3 added sample_fields and the head's fields and max_fields; 4 moved the skip records out of
                      # the head into SKIPS_PATH (the head keeps their summary); 5 added the row groups (ROWS_PATH,
                      # BLOCKS_PATH) that remote readers read instead of the .npy columns; 6 added each field's place
                      # and checksum (FIELD_COLUMNS, field_start, counts.fields); 1 to 5 still open
HEAD_NAME = "manifest.json"
COLUMNS_DIR = "columns"
V1_COLUMNS_NAME = "manifest.npz"
PACK_METADATA = (HEAD_NAME, COLUMNS_DIR, V1_COLUMNS_NAME)  # everything in OUTPUT that is not a shard
ENERGON_META, WIDS_INDEX_NAME = ".nv-meta", "shardindex.json"
INDEX_FILES = (ENERGON_META, WIDS_INDEX_NAME)  # other readers' index files beside the shards (corgi_io/indexes),
                                               # removed with the pack they describe; their per-shard files are shard-*
SKIPS_PATH = f"{COLUMNS_DIR}/skipped.jsonl"  # the skip records, a JSON object a line (version 4 on)
SKIPS_SINCE = 4           # the first version whose head summarises the skip records instead of listing them
ROWS_PATH = f"{COLUMNS_DIR}/rows.bin"      # each block's per-sample rows side by side (version 5 on: row_groups.py)
BLOCKS_PATH = f"{COLUMNS_DIR}/blocks.bin"  # the block table as one int64 matrix, with where each row group starts
ROWS_SINCE = 5            # the first version with ROWS_PATH and BLOCKS_PATH
MAX_SKIP_REASONS = 64     # reasons counted by name in the head's summary of the skip records

SAMPLE_COLUMNS = {
    "label": np.int32,        # class id into the head's labels, -1 when unlabeled
    "kind": np.uint8,         # index into KINDS
    "ext": np.uint16,         # index into the head's extensions (the original file's, lower case)
    "bytes": np.int64,        # primary payload bytes (the original file, unchanged)
    "size": np.int64,         # work units: pixels, frames, tokens or a custom size
    "shard": np.int32,        # index into head["shards"]
    "offset": np.int64,       # record start in the shard (tar headers / TFRecord framing included)
    "length": np.int64,       # record length
    "data_offset": np.int64,  # primary payload start in the shard
    "checksum": np.uint32,    # head["checksum"] of the record bytes, checked by the loader and `corgi verify`
    "fields": np.uint64,      # bit i set when the sample has field head["fields"][i] (version 3 on)
}
FIELDS_SINCE = 3  # the first version with the sample_fields column
FIELD_COLUMNS = {  # a row per field of each sample (version 6 on), sample i's are rows [field_start[i], field_start[i + 1])
    "id": np.uint8,           # which field: index into head["fields"] (bit `id` of its sample_fields)
    "framing": np.uint32,     # bytes of framing before the payload: its tar member's header blocks (a pax header's
                              # included), or its TFRecord feature's map entry up to the bytes value
    "offset": np.int64,       # payload start in the shard (the framing starts `framing` bytes before)
    "length": np.int64,       # payload bytes
    "crc": np.uint32,         # head["checksum"] of the payload alone (not running): a field is checked on its own
}
FIELD_RANGES_SINCE = 6  # the first version with FIELD_COLUMNS, field_start and counts.fields
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
DUPLICATE_REASON = "its primary field's bytes equal an earlier sample's (--dedup)"  # the skip record of a duplicate
ROWS_AT_ONCE = 1 << 20  # rows validated in one vectorised step: bounds the temporaries of a full validation


def column_path(name: str) -> str:
    """Path of column `name` (e.g. "sample_size") relative to the pack root."""
    return f"{COLUMNS_DIR}/{name}.npy"


def sample_columns(version: int = MANIFEST_VERSION) -> dict:
    """{name: dtype} of the per-sample columns that a pack of `version` has."""
    return {n: t for n, t in SAMPLE_COLUMNS.items() if n != "fields" or version >= FIELDS_SINCE}


def field_columns(version: int = MANIFEST_VERSION) -> dict:
    """{column file name: dtype} of the per-field columns of `version`, ``field_start`` first (none before 6)."""
    if version < FIELD_RANGES_SINCE:
        return {}
    return {"field_start": np.int64, **{f"field_{n}": t for n, t in FIELD_COLUMNS.items()}}


def column_schema(version: int = MANIFEST_VERSION) -> dict:
    """{column file name: dtype} of every column of `version` (the current one by default), in the order
    `save_manifest` writes them."""
    return {**{f"sample_{n}": t for n, t in sample_columns(version).items()},
            **{f"block_{n}": t for n, t in BLOCK_COLUMNS.items()}, **KEY_COLUMNS, **field_columns(version)}


def declared_rows(counts: dict, version: int = MANIFEST_VERSION) -> dict:
    """{column file name: rows} that a head's counts declare (version 2 on)."""
    rows = {"key_blob": counts["key_bytes"], "key_offsets": counts["samples"] + 1}
    rows.update({f"sample_{n}": counts["samples"] for n in sample_columns(version)})
    rows.update({f"block_{n}": counts["blocks"] for n in BLOCK_COLUMNS})
    rows.update({name: counts["fields"] for name in field_columns(version)})
    if version >= FIELD_RANGES_SINCE:
        rows["field_start"] = counts["samples"] + 1
    return rows

"""Writing a manifest: each column, the row groups and the skip records atomically, then the head last, so a head
on disk always describes complete files."""
from __future__ import annotations

import json
from pathlib import Path
import numpy as np

from corgi_io.manifest.row_group_writer import write_row_groups
from corgi_io.manifest.skips import write_skip_records
from corgi_io.manifest.schema import (BLOCK_COLUMNS, COLUMNS_DIR, FIELD_COLUMNS, HEAD_NAME, MANIFEST_VERSION,
                                      SAMPLE_COLUMNS, column_path, column_schema)



def encode_keys(keys) -> tuple:
    """Pack a sequence of str keys into (uint8 blob, int64 offsets of length n+1); a packed pair passes through."""
    if isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(part, np.ndarray) for part in keys):
        return keys
    encoded = [k.encode("utf-8") for k in keys]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets




def save_manifest(root, head: dict, samples: dict, blocks: dict, keys, fields: dict) -> None:
    """Write every column then the head, each atomically (temporary name, then rename).

    `keys` (str keys, or the (blob, offsets) pair) may be a function that returns them: it is called
    once the other columns are written, so that a pack's driver never holds the keys and a column at once.
    `fields` are the per-field columns: "start" (n + 1: sample i's fields are rows [start[i], start[i + 1])) and
    each of FIELD_COLUMNS, a row per field of every sample (schema.py).
    """
    for name in SAMPLE_COLUMNS:
        save_column(root, f"sample_{name}", samples[name])  # head["fields"] and head["max_fields"] name its bits
    for name in BLOCK_COLUMNS:
        save_column(root, f"block_{name}", blocks[name])
    key_blob, key_offsets = encode_keys(keys() if callable(keys) else keys)
    save_column(root, "key_blob", key_blob)
    save_column(root, "key_offsets", key_offsets)
    counts = {"samples": len(key_offsets) - 1, "blocks": len(blocks["first"]), "key_bytes": len(key_blob)}
    del key_blob, key_offsets
    save_column(root, "field_start", fields["start"])
    counts["fields"] = [save_column(root, f"field_{name}", fields[name]) for name in FIELD_COLUMNS][0]
    save_head(root, head, counts)


def save_column(root, name: str, array) -> int:
    """Write column `name` of `column_schema()` atomically, as a flat little-endian .npy of its dtype; its rows."""
    from corgi_io.storage.atomic import atomic_output

    (Path(root) / COLUMNS_DIR).mkdir(exist_ok=True)
    with atomic_output(Path(root) / column_path(name)) as f:
        column = np.ascontiguousarray(array, dtype=np.dtype(column_schema()[name]).newbyteorder("<"))
        np.save(f, column, allow_pickle=False)
    return len(column)


def save_head(root, head: dict, counts: dict) -> None:
    """Write the row groups (`row_groups.py`), the skip records then the head, each atomically, after every column:
    `counts` are the columns' rows (samples, blocks, key_bytes, fields); ``head["skipped"]``, the skip records ({"path", "reason"} each, any iterable),
    goes to the skip file and the head keeps their summary (skips.py), so that opening a pack costs the same
    whatever their number."""
    from corgi_io.storage.atomic import atomic_output

    counts = {**counts, "rows_bytes": write_row_groups(root, counts["blocks"])}  # from the columns just written
    head = dict(head, corgi_manifest_version=MANIFEST_VERSION, counts=counts,
                skipped=write_skip_records(root, head.get("skipped", ())))
    with atomic_output(Path(root) / HEAD_NAME) as f:
        f.write(json.dumps(head, indent=1, ensure_ascii=False).encode("utf-8"))

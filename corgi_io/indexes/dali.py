"""DALI's WebDataset index: the ``.idx`` file that DALI's ``tools/wds2idx.py`` writes beside each tar shard.

The format (DALI's ``webdataset_loader.cc`` parses it; ``fn.readers.webdataset(paths=..., index_paths=...)``
reads it): a first line ``v1.2 <samples>``, then a line per sample holding, for each of its tar members in
order (the primary field, the others, ``cls``), ``<field> <data offset> <size> <member name>``, separated by
spaces.  The offset is where the member's data starts in the tar (after its header), a multiple of 512.
The file is named as wds2idx names it: the shard's path up to the first dot of its base name, plus ``.idx``.

DALI reads the line with C++ ``>>``, so a name holding a space (or another ASCII white space) cannot be
written: a shard with such a key gets the ``v1.1`` form instead, ``<field> <offset> <size>`` per member
without names, which DALI accepts alike (the names only label its error messages); one warning says so.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from corgi_io.indexes.members import shard_samples
from corgi_io.storage.atomic import atomic_output

VERSION, UNNAMED_VERSION = "v1.2", "v1.1"
WHITE_SPACE = np.frombuffer(b" \t\n\v\f\r", dtype=np.uint8)  # what C++ `>>` splits a line at


def index_path(shard_path: str) -> str:
    """The index of a shard as wds2idx names it: `shard-000000.tar` -> `shard-000000.idx`."""
    slash = shard_path.rfind("/") + 1
    dot = shard_path.find(".", slash + 1)
    return (shard_path[:dot] if dot >= 0 else shard_path) + ".idx"


def write(manifest, storage, folder: str) -> list:
    """Write each shard's `.idx` under `folder` (the pack's root, or where it is staged), atomically; the paths
    written, relative."""
    written, unnamed = [], []
    for shard in range(len(manifest.shards)):
        spaced = _first_spaced_key(manifest, shard)
        if spaced is not None:
            unnamed.append((manifest.shards.path(shard), spaced))
        written.append(_write_shard(manifest, storage, folder, shard, named=spaced is None))
    if unnamed:
        path, key = unnamed[0]
        warnings.warn(f"{len(unnamed)} of {len(written)} shards hold keys with white space, which DALI's index "
                      f"cannot name (first: {key!r} in {path}): their .idx files are written without member names "
                      f"({UNNAMED_VERSION}), which DALI reads the same", stacklevel=2)
    return written


def _write_shard(manifest, storage, folder: str, shard: int, named: bool) -> str:
    """Write the index of shard `shard`; its path relative to the pack's root."""
    relpath = index_path(manifest.shards.path(shard))
    os.makedirs(os.path.dirname(f"{folder}/{relpath}"), exist_ok=True)  # a shard's folder, where staged for S3
    with atomic_output(f"{folder}/{relpath}", "w") as out:
        out.write(f"{VERSION if named else UNNAMED_VERSION} {int(manifest.shards.samples[shard])}\n")
        for _key, members in shard_samples(manifest, storage, shard):
            parts = (f"{m.field} {m.offset} {m.size}" + (f" {m.name}" if named else "") for m in members)
            out.write(" ".join(parts) + "\n")
    return relpath


def _first_spaced_key(manifest, shard: int) -> str | None:
    """The first key of shard `shard` holding white space, found in the key blob without decoding keys."""
    first = int(manifest.shards.first_sample[shard])
    stop = first + int(manifest.shards.samples[shard])
    manifest.validate_rows(first, stop)
    lo, hi = int(manifest.key_offsets[first]), int(manifest.key_offsets[stop])
    hits = np.flatnonzero(np.isin(np.asarray(manifest.key_blob[lo:hi]), WHITE_SPACE))
    if not len(hits):
        return None
    sample = int(np.searchsorted(np.asarray(manifest.key_offsets[first:stop + 1]), lo + hits[0], "right")) - 1
    return manifest.key(first + sample)

"""wids' shard list: the ``shardindex.json`` that webdataset's ``widsindex create`` writes and
``wids.ShardListDataset("PACK/shardindex.json")`` reads.

The format (wids' ``wids_specs.py`` and ``wids_index.py``)::

    {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "<pack folder>",
     "shardlist": [{"url": "shard-000000.tar", "nsamples": 256, "filesize": 41472000}, ...]}

Everything comes from the manifest: no shard is read.  The urls are relative, so wids resolves them
against the JSON file's own location (local or a URL) and the file moves with the pack.  The shards keep
the manifest's order, so wids' sample index i is corgi's sample i.  ``widsindex`` also records each
shard's ``md5sum``, which wids checks only when present: it would cost reading every shard, so it is
left out (the manifest's checksums and ``corgi verify`` check the bytes).

wids' tar reader (``wids_mmtar.py``) reads plain ustar headers only: a member whose name passes 100 bytes,
which corgi (as tarfile) writes with a pax header, reaches it under its name cut to 100 bytes, so its sample is
lost and its shard's count is off.  One warning names the first such key; the JSON still gives the true counts.
"""
from __future__ import annotations

import json
import warnings

import numpy as np

from corgi_io.manifest import WIDS_INDEX_NAME as FILE_NAME  # widsindex's default output name
from corgi_io.manifest.schema import ROWS_AT_ONCE
from corgi_io.storage.atomic import atomic_output

KIND = "wids-shard-index-v1"
USTAR_NAME_BYTES = 100  # the longest member name a plain ustar header holds


def write(manifest, storage, folder: str) -> list:
    """Write `folder`/shardindex.json (the pack's root, or where it is staged), atomically, named after the pack's
    folder; the path written, relative, in a list."""
    shards = manifest.shards
    shardlist = [{"url": shards.path(i), "nsamples": int(shards.samples[i]), "filesize": int(shards.bytes[i])}
                 for i in range(len(shards))]
    spec = {"__kind__": KIND, "wids_version": 1, "name": storage.root.rstrip("/").rsplit("/", 1)[-1],
            "shardlist": shardlist}
    with atomic_output(f"{folder}/{FILE_NAME}", "w") as out:
        json.dump(spec, out, indent=1)
        out.write("\n")
    _warn_long_names(manifest)
    return [FILE_NAME]


def _warn_long_names(manifest) -> None:
    """One warning when a sample's member names may pass USTAR_NAME_BYTES (key, dot, the longest field name of the
    pack or `cls`): wids does not read them.  The key lengths are read a chunk of rows at a time."""
    longest = max(len(name.encode()) for name in [*manifest.fields, "cls"])
    count, first = 0, None
    for start in range(0, manifest.num_samples, ROWS_AT_ONCE):
        lengths = np.diff(np.asarray(manifest.key_offsets[start:start + ROWS_AT_ONCE + 1]))
        long = np.flatnonzero(lengths + 1 + longest > USTAR_NAME_BYTES)
        count += len(long)
        first = start + int(long[0]) if first is None and len(long) else first
    if count:
        warnings.warn(f"{count} samples have tar member names that may pass {USTAR_NAME_BYTES} bytes (first: key "
                      f"{manifest.key(first)!r}), which wids' tar reader does not read (pax headers): wids loses "
                      f"them and miscounts their shards; for wids, keep keys to {USTAR_NAME_BYTES - 1 - longest} "
                      f"bytes at most", stacklevel=2)

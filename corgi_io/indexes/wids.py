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
"""
from __future__ import annotations

import json
import os

from corgi_io.storage.atomic import atomic_output

FILE_NAME = "shardindex.json"  # widsindex's default output name
KIND = "wids-shard-index-v1"


def write(manifest, storage, folder: str) -> list:
    """Write `folder`/shardindex.json (the pack's root), atomically; the path written, relative, in a list."""
    shards = manifest.shards
    shardlist = [{"url": shards.path(i), "nsamples": int(shards.samples[i]), "filesize": int(shards.bytes[i])}
                 for i in range(len(shards))]
    spec = {"__kind__": KIND, "wids_version": 1, "name": os.path.basename(folder.rstrip("/")),
            "shardlist": shardlist}
    with atomic_output(f"{folder}/{FILE_NAME}", "w") as out:
        json.dump(spec, out, indent=1)
        out.write("\n")
    return [FILE_NAME]

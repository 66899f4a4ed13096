"""A process that reads one epoch of a remote pack through a shared cache folder and reports what it saw:
``python -m helpers.cache_reader URL CACHE_DIR LIMIT EPOCH OUT_JSON`` (tests/loaders/test_loader_cache.py)."""
from __future__ import annotations

import hashlib
import json
import sys

from corgi_io.loaders import Cache, CorgiPileDataset, Reading, Shuffle


def main(url: str, cache_dir: str, limit: str, epoch: str, out: str) -> None:
    """One epoch with the cache; writes {digests: {key: sha256}, fetches, refetches, remote_bytes} to `out`."""
    ds = CorgiPileDataset(url, shuffle=Shuffle(buffer_blocks=2), seed=5, reading=Reading(prefetch_blocks=0),
                          cache=Cache(cache_dir, int(limit)))
    ds.set_epoch(int(epoch))
    digests = {s["key"]: hashlib.sha256(s["data"]).hexdigest() for s in ds}
    cache = ds.last_reader.cache
    with open(out, "w") as f:
        json.dump({"digests": digests, "fetches": cache.fetches, "refetches": cache.refetches,
                   "remote_bytes": ds.storage.bytes_read}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

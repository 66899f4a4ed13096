"""Unique keys for 10^9 files without a set of 10^9 strings: equal keys are found through equal hashes.

Files that share a key (photo.JPG beside photo.png) keep their escaped extension, case and all, in
the key.  Keys that are still equal after that (two listing rows with one key) fail the pack,
naming both inputs.  The walk keeps one 64-bit hash per key; only files whose hash repeats are
read back and compared, so the cost is one sort of the hash column, and the outcome does not
depend on the hash (it only finds candidates).
"""
from __future__ import annotations

import os

import numpy as np

from corgi_io.errors import CorpusError
from corgi_io.packing.walk import escaped_extension, printable

CHUNK = 1 << 16  # candidates compared at a time


def suffix(raw: str) -> str:
    """What a file's key gains when another file has the same key: '%2E' and its escaped extension, case kept."""
    return "%2E" + escaped_extension(os.path.basename(raw).rsplit(".", 1)[-1])


def make_unique(corpus, key_hash: np.ndarray, source) -> None:
    """Mark files that share a key in `corpus.suffixed` (and lengthen their `key_bytes`); CorpusError if keys
    are still not unique.  `key_hash` holds hash(key) per file; it is updated to the final keys' hashes."""
    def keys(indices):
        return corpus.names_and_keys(indices)[1]

    for group in _equal_key_groups(key_hash, keys):
        corpus.suffixed[group] = True
    suffixed = np.flatnonzero(corpus.suffixed)
    if not len(suffixed):
        return
    for start in range(0, len(suffixed), CHUNK):
        indices = suffixed[start:start + CHUNK]
        final = keys(indices)
        key_hash[indices] = [hash(key) for key in final]
        corpus.key_bytes[indices] = [len(key.encode("utf-8")) for key in final]
    clash = min(_equal_key_groups(key_hash, keys), key=lambda group: group[1], default=None)
    if clash is not None:
        names, (key, _) = corpus.names_and_keys(clash[:2])
        raise CorpusError(f"{source}: two inputs have the same key '{key}' "
                          f"({printable(names[0])}, {printable(names[1])})")


def _equal_key_groups(key_hash: np.ndarray, keys_of):
    """Ascending index lists (two or more) of files whose keys, as `keys_of(indices)` gives them, are equal."""
    candidates = _with_repeated_hash(key_hash)
    by_hash = candidates[np.argsort(key_hash[candidates], kind="stable")]
    hashes = key_hash[by_hash]
    runs = np.append(np.flatnonzero(np.diff(hashes, prepend=hashes[:1] - 1) != 0), len(by_hash))
    start = 0
    while start < len(by_hash):  # chunks of whole runs of one hash: equal keys never straddle two chunks
        stop = int(runs[min(np.searchsorted(runs, start + CHUNK), len(runs) - 1)])
        indices = by_hash[start:stop]
        groups = {}
        for index, key in zip(indices.tolist(), keys_of(indices)):
            groups.setdefault(key, []).append(index)
        yield from (sorted(group) for group in groups.values() if len(group) > 1)
        start = stop


def _with_repeated_hash(key_hash: np.ndarray) -> np.ndarray:
    """Ascending indices of the files whose hash occurs more than once."""
    ordered = np.sort(key_hash)
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    del ordered
    if not len(repeated):
        return np.zeros(0, dtype=np.int64)
    found = []
    for start in range(0, len(key_hash), 1 << 20):  # bounded temporaries
        part = key_hash[start:start + (1 << 20)]
        at = np.minimum(np.searchsorted(repeated, part), len(repeated) - 1)
        found.append(start + np.flatnonzero(repeated[at] == part))
    return np.concatenate(found)

"""Unique keys for 10^9 samples without a set of 10^9 strings: equal keys are found through equal hashes.

Files of a folder that share a stem are one sample (corpus.py), so only two listing rows with one
key can clash: that fails the pack, naming both inputs.  The walk keeps one 64-bit hash per key; only files whose hash repeats are
read back and compared, so the cost is one sort of the hash column, and the outcome does not
depend on the hash (it only finds candidates).

Packs of existing shards (unit_manifest.py) check their keys the same way with a hash that every
worker computes alike (`stable_key_hash`), and only warn: a WebDataset corpus may repeat a key.
"""
from __future__ import annotations

import hashlib

import numpy as np

from corgi_io.errors import CorpusError
from corgi_io.packing.walk import printable

CHUNK = 1 << 16  # candidates compared at a time


def check_unique(corpus, key_hash: np.ndarray, source) -> None:
    """CorpusError naming two inputs whose samples have the same key (two listing rows); `key_hash` holds hash(key)
    per sample.  A folder walk never gives one: its distinct stems escape to distinct keys (walk.key_from_path)."""
    clash = min(equal_key_groups(key_hash, lambda indices: corpus.names_and_keys(indices)[1]),
                key=lambda group: group[1], default=None)
    if clash is not None:
        names, (key, _) = corpus.names_and_keys(clash[:2])
        raise CorpusError(f"{source}: two inputs have the same key '{key}' "
                          f"({printable(names[0])}, {printable(names[1])})")


def equal_key_groups(key_hash: np.ndarray, keys_of):
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


def stable_key_hash(key: bytes) -> int:
    """A 64-bit hash of a key's UTF-8 bytes that is the same in every process (Python's `hash` of a str is not)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little", signed=True)

"""The tables an opened manifest is made of: its shards (kept as arrays) and its column sets."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shard:
    """One shard file: its path relative to the dataset root, size and sample range."""

    path: str
    bytes: int
    first_sample: int
    samples: int


class ShardTable(Sequence):
    """The shards of a pack, a read-only sequence of `Shard`s kept as arrays (paths in one UTF-8 blob).

    A pack of 10^9 samples in 512 MiB shards has ~200k of them: as Python objects they would
    cost every rank ~100 MB; here they cost ~40 bytes each, and a `Shard` is made when asked for.
    """

    def __init__(self, paths, nbytes, first_sample, samples):
        encoded = [path.encode("utf-8") for path in paths]
        self._blob = b"".join(encoded)
        self._bounds = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=self._bounds[1:])
        self.bytes, self.first_sample, self.samples = (np.array(c, dtype=np.int64) for c in (nbytes, first_sample, samples))

    def __len__(self) -> int:
        return len(self.bytes)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = operator.index(index)
        i += len(self) if i < 0 else 0
        if not 0 <= i < len(self):
            raise IndexError(f"shard {index} of {len(self)}")
        return Shard(self.path(i), int(self.bytes[i]), int(self.first_sample[i]), int(self.samples[i]))

    def path(self, index: int) -> str:
        """The path of shard `index` alone."""
        return self._blob[self._bounds[index]:self._bounds[index + 1]].decode("utf-8")

    def __eq__(self, other):
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards)"


@dataclass(frozen=True)
class Columns:
    """A set of equal-length numpy arrays addressed by attribute (``samples.size``)."""

    arrays: dict

    def __getattr__(self, name):
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self):
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

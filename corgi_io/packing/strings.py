"""Many strings without a Python object each: their bytes in a file, their int64 offsets in memory.

The pack driver must hold every file's name and key for as long as the pack runs, and at
10^9 files a Python ``str`` each (50 bytes of header plus the text) would not fit.  A
`SpooledStrings` appends them, a chunk at a time, to an unnamed temporary file (it vanishes
with its process, even after kill -9) and keeps only the offsets; strings are read back by
index through a memory map whose pages are released after every read, so neither the
strings nor their pages stay in the process.

Strings are stored as UTF-8 with 'surrogatepass', so that every Python str round-trips,
including file names with bytes that are not UTF-8 (which os.fsdecode turns into surrogates).
"""
from __future__ import annotations

import mmap
import tempfile

import numpy as np

ENCODING, ERRORS = "utf-8", "surrogatepass"


def encode(text: str) -> bytes:
    return text.encode(ENCODING, ERRORS)


def decode(data) -> str:
    return bytes(data).decode(ENCODING, ERRORS)


class SpooledStrings:
    """Strings appended in chunks to an unnamed file in `directory` (the system's temporary folder by default)."""

    def __init__(self, directory=None):
        self._file = tempfile.TemporaryFile(dir=directory)
        self._lengths = []          # one int64 array per appended chunk, until `seal`
        self._map = None
        self.offsets = None         # int64, len + 1, after `seal`

    def extend(self, items: list) -> None:
        """Append `items` (str or already encoded bytes)."""
        data = [encode(item) if isinstance(item, str) else item for item in items]
        self._file.write(b"".join(data))
        self._lengths.append(np.fromiter(map(len, data), dtype=np.int64, count=len(data)))

    def seal(self) -> None:
        """Finish appending; from now on strings are read back by index."""
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        self._lengths = None
        self.offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self._file.flush()
        if self.offsets[-1]:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, indices) -> list:
        """The bytes of the strings at `indices`, in that order; the map's pages are released afterwards."""
        bounds = self.offsets
        starts, stops = bounds[indices].tolist(), bounds[np.asarray(indices) + 1].tolist()
        if self._map is None:
            return [b""] * len(starts)
        found = [self._map[a:b] for a, b in zip(starts, stops)]
        self._map.madvise(mmap.MADV_DONTNEED)  # drop the pages from this process: its RSS stays flat
        return found

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._file.close()

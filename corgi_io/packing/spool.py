"""Per-file values that the pack driver spools to unnamed files while it walks, and reads back whole.

At 10^9 files a Python object per file (50 bytes of header, plus the text of a name) would not
fit, and even numpy chunks kept in memory until the walk ends leave the heap fragmented (many
mid-size arrays among the walk's short-lived objects).  So each chunk of the walk is appended
to unnamed temporary files (they vanish with the process, even after kill -9) and read back in
one exact allocation per column when the walk is done:

* `SpooledColumn` - one fixed-size value per file (a numpy dtype);
* `SpooledStrings` - one variable-length string per file: the bytes stay on disk, only the int64
  offsets come back, and strings are read by index with one pread each, so neither the strings nor
  their pages are ever in the process.  (A memory map, its pages released after each `take`, still
  set the peak: a chunk of indices in pack order, a random permutation, touched every page of the
  file, and the kernel's fault-around mapped the rest, so the driver's peak RSS grew by the whole
  file, 57 bytes per file of ImageNet-like names.)

Strings are stored as UTF-8 with 'surrogatepass', so that every Python str round-trips, including
file names with bytes that are not UTF-8 (which os.fsdecode turns into surrogates).
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

ENCODING, ERRORS = "utf-8", "surrogatepass"


def encode(text: str) -> bytes:
    return text.encode(ENCODING, ERRORS)


def decode(data) -> str:
    return bytes(data).decode(ENCODING, ERRORS)


class SpooledColumn:
    """Values of one dtype appended in chunks to an unnamed file in `directory`, read back as one array."""

    def __init__(self, dtype, directory=None):
        self.dtype, self.count = np.dtype(dtype), 0
        self._file = tempfile.TemporaryFile(dir=directory)

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self.dtype)
        self._file.write(values.tobytes())
        self.count += len(values)

    def read(self, into: np.ndarray | None = None) -> np.ndarray:
        """All values (into `into`, if given), and the file is closed."""
        column = np.empty(self.count, dtype=self.dtype) if into is None else into
        self._file.seek(0)
        if self._file.readinto(memoryview(column).cast("B")) != column.nbytes:
            raise OSError(0, "spooled column came back short", getattr(self._file, "name", None))
        self._file.close()
        return column


class SpooledStrings:
    """Strings appended in chunks to an unnamed file in `directory`; after `seal`, read back by index."""

    def __init__(self, directory=None):
        self._file = tempfile.TemporaryFile(dir=directory)
        self._lengths = SpooledColumn(np.int64, directory)
        self.offsets = None         # int64, len + 1, after `seal`

    def extend(self, items: list) -> None:
        """Append `items` (str)."""
        data = [encode(item) for item in items]
        self._file.write(b"".join(data))
        self._lengths.extend([len(item) for item in data])

    def seal(self) -> None:
        """Finish appending; from now on strings are read back by index."""
        self.offsets = np.zeros(self._lengths.count + 1, dtype=np.int64)
        np.cumsum(self._lengths.read(into=self.offsets[1:]), out=self.offsets[1:])
        self._file.flush()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, indices) -> list:
        """The bytes of the strings at `indices`, in that order, each read on its own (nothing is mapped)."""
        indices, fd, pread = np.asarray(indices), self._file.fileno(), os.pread
        starts, lengths = self.offsets[indices], self.offsets[indices + 1] - self.offsets[indices]
        found = [pread(fd, length, start) for start, length in zip(starts.tolist(), lengths.tolist())]
        if sum(map(len, found)) != int(lengths.sum()):
            raise OSError(0, "spooled strings came back short", getattr(self._file, "name", None))
        return found

    def close(self) -> None:
        self._file.close()

"""Remote manifest columns that read only the rows they are asked for (`LazyColumn`), page by page (`RangedColumn`).

A remote pack (http, hdfs, s3) is not downloaded whole: `RangedColumn` behaves like the
read-only 1-D array of one `.npy` column, and fetches the pages (4 KiB of the column) that
an index touches, with one `storage.read_range` per run of consecutive missing pages.  The
pages land in an anonymous memory map the size of the column, so the memory a process
spends is the pages it touched, nothing more (no transparent huge pages: a scattered rank
must not commit 2 MiB per row).  What an index returns is a plain ndarray view or scalar,
exactly as from a local column.  Whole-column operations (ufuncs, `np.asarray`, any ndarray
method such as `sum` or `tolist`) fetch whatever is still missing, in one read per run.
"""
from __future__ import annotations

import mmap
import threading

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from corgi_io.errors import ArgumentError

PAGE = mmap.PAGESIZE


class LazyColumn(NDArrayOperatorsMixin):
    """A read-only 1-D column of `rows` items of `dtype` over `view`, whose rows are fetched before they are read.

    Subclasses say how: `fill(start, stop)` fetches rows [start, stop), `complete` says whether they are here,
    `_has(index)` is the one-row check of the scalar fast path and `_fill_rows(rows)` fetches scattered rows."""

    def __init__(self, dtype, rows: int, view: np.ndarray):
        self.dtype, self._rows, self._view = np.dtype(dtype), int(rows), view
        self._nbytes = self._rows * self.dtype.itemsize

    # --- what a 1-D array tells about itself, without fetching anything -------------------------
    shape = property(lambda self: (self._rows,))
    size = property(lambda self: self._rows)
    ndim = property(lambda self: 1)
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self._nbytes)

    def __len__(self) -> int:
        return self._rows

    def fill(self, start: int = 0, stop: int | None = None) -> None:
        raise NotImplementedError

    def complete(self, start: int = 0, stop: int | None = None) -> bool:
        raise NotImplementedError

    def _has(self, index: int) -> bool:
        raise NotImplementedError

    def _fill_rows(self, rows: np.ndarray) -> None:
        raise NotImplementedError

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            index = int(key) + self._rows if key < 0 else int(key)
            if not 0 <= index < self._rows:
                raise IndexError(f"index {int(key)} is out of bounds for a column of {self._rows} rows")
            if not self._has(index):
                self.fill(index, index + 1)
            return self._view[index]
        if isinstance(key, slice):
            start, stop, step = key.indices(self._rows)
            low, high = (start, stop) if step > 0 else (stop + 1, start + 1)
            self.fill(low, high)
            return self._view[key]
        if isinstance(key, (list, np.ndarray)):
            index = np.asarray(key)
            if index.dtype == bool and index.shape == (self._rows,):
                index = np.flatnonzero(index)
            if index.dtype.kind in "iu" or index.size == 0:
                rows = np.where(index < 0, index + self._rows, index).ravel().astype(np.int64)
                self._fill_rows(rows[(rows >= 0) & (rows < self._rows)])  # numpy raises for the others below
                return self._view[key]
        return np.asarray(self)[key]

    def __array__(self, dtype=None, copy=None):
        self.fill()
        return self._view if dtype is None else self._view.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [np.asarray(x) if isinstance(x, LazyColumn) else x for x in inputs]
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __iter__(self):
        return iter(np.asarray(self))

    def __getattr__(self, name):
        """Any other ndarray attribute (sum, min, tolist, astype...) of the whole column, fetched first."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def __reduce__(self):
        raise ArgumentError(f"a {type(self).__name__} cannot be serialised for another process: send its Manifest, "
                            "which reopens the pack")


def anonymous_array(dtype, rows: int) -> np.ndarray:
    """A writable array of `rows` items over an anonymous map: memory is spent only on the pages written (no
    transparent huge pages: a scattered rank must not commit 2 MiB per row)."""
    buffer = mmap.mmap(-1, max(rows * np.dtype(dtype).itemsize, 1), flags=mmap.MAP_PRIVATE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        buffer.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buffer, np.dtype(dtype), count=int(rows))


class RangedColumn(LazyColumn):
    """The `rows` items of `dtype` stored at byte `data_offset` of `relpath` in `storage`, read on demand."""

    def __init__(self, storage, relpath: str, dtype, rows: int, data_offset: int):
        view = anonymous_array(dtype, rows)
        self._buffer = view.base  # fills write the buffer; readers get the read-only view
        view.flags.writeable = False
        super().__init__(dtype, rows, view)
        self._storage, self._relpath, self._data_offset = storage, relpath, int(data_offset)
        self._filled = np.zeros(-(-self._nbytes // PAGE), dtype=bool)  # one flag per page of the column
        self._lock = threading.Lock()  # reading threads may ask for the same page at once

    def __repr__(self) -> str:
        return (f"RangedColumn({self._storage.url(self._relpath)}, {self._rows} x {self.dtype}, "
                f"{self.pages_read} of {len(self._filled)} pages read)")

    def fill(self, start: int = 0, stop: int | None = None) -> None:
        """Fetch rows [start, stop) (all by default) that are not here yet, one read per run of missing pages."""
        self._fill_pages(self._pages(start, stop))

    def complete(self, start: int = 0, stop: int | None = None) -> bool:
        """True when rows [start, stop) (all by default) are here: reading them costs no request."""
        return bool(self._filled[self._pages(start, stop)].all())

    def _has(self, index: int) -> bool:
        return self._filled[index * self.itemsize // PAGE]

    def _fill_rows(self, rows: np.ndarray) -> None:
        self._fill_pages(np.unique(rows * self.itemsize // PAGE))

    @property
    def pages_read(self) -> int:
        """Pages of PAGE bytes fetched so far (what this column costs in memory)."""
        return int(self._filled.sum())

    def _pages(self, start: int, stop: int | None) -> np.ndarray:
        stop = self._rows if stop is None else min(stop, self._rows)
        start = max(start, 0)
        if start >= stop:
            return np.zeros(0, dtype=np.int64)
        return np.arange(start * self.itemsize // PAGE, -(-stop * self.itemsize // PAGE))

    def _fill_pages(self, pages: np.ndarray) -> None:
        missing = pages[~self._filled[pages]]
        if not len(missing):
            return
        with self._lock:
            missing = missing[~self._filled[missing]]
            runs = np.split(missing, np.flatnonzero(np.diff(missing) != 1) + 1) if len(missing) else []
            for run in runs:
                lo, hi = int(run[0]) * PAGE, min((int(run[-1]) + 1) * PAGE, self._nbytes)
                self._buffer[lo:hi] = self._storage.read_range(self._relpath, self._data_offset + lo, hi - lo)
                self._filled[run] = True

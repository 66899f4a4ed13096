"""Ranged reads of shard files in place (atomic writes live in corgi_io.storage.atomic).

The loader reads each block with one `read_range`; the manifest holds every
offset and size, so nothing is listed or stat'ed per sample. Local paths (and
Lustre) use os.pread on cached descriptors; http(s) URLs urllib3 range requests,
other URLs fsspec range reads, both riding out outages within a time budget
(exponential backoff, full jitter).
A read returns exactly the bytes asked for or raises StorageError naming file
and offset. `reads`/`bytes_read` let tests count reads.
"""
from __future__ import annotations

import contextlib
import os
from collections import OrderedDict

from corgi_io.errors import StorageError
from corgi_io.storage.base import Storage






class LocalStorage(Storage):
    """POSIX files (local disk, NFS, Lustre) read with os.pread on cached descriptors.

    pread takes the offset, so no per-read open, seek or stat. At most `max_open`
    idle descriptors stay open (LRU); one in use by a reading thread is never closed
    under it. Each process opens its own: a forked descriptor shares the kernel
    readahead state, so workers reading different blocks would defeat it.
    """

    reads_in_flight = (2, 2)  # (first, most): a second read helps Lustre RPCs and cold disks; more costs GIL time

    def __init__(self, root: str, *, max_open: int = 64, fadvise: bool = True):
        super().__init__(os.path.abspath(os.path.expanduser(root)))
        self.max_open, self.fadvise = max_open, fadvise
        self._fds: OrderedDict[str, list] = OrderedDict()  # path -> [fd, threads using it]

    @contextlib.contextmanager
    def _fd(self, path: str):
        """A descriptor for `path`, held open while the caller reads."""
        with self._lock:
            if self._forked():
                self._close_idle(0, inherited=True)  # the parent's copies stay open in the parent
            entry = self._fds.get(path)
            if entry is None:
                self._refuse_outside(path)
                fd = os.open(path, os.O_RDONLY)  # non-inheritable across exec (PEP 446)
                if self.fadvise and hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # blocks are long runs
                entry = self._fds[path] = [fd, 0]
            self._fds.move_to_end(path)
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1] -= 1
                self._close_idle(self.max_open)

    def _refuse_outside(self, path: str) -> None:
        """StorageError for a path whose real location (symlinks resolved) is not inside the real root.

        Manifests name only relative paths, but a symlink inside a pack could still point
        anywhere; one realpath per file opened keeps every read inside the pack.
        """
        root = os.path.realpath(self.root)
        if not os.path.realpath(path).startswith(root.rstrip("/") + "/"):
            raise StorageError(f"{path}: resolves to {os.path.realpath(path)}, outside the pack root {root}")

    def _close_idle(self, keep: int, inherited: bool = False) -> None:
        """Close least-recently-used descriptors no thread is using until at most `keep` remain."""
        for path in list(self._fds):
            if len(self._fds) <= keep:
                return
            if inherited or self._fds[path][1] == 0:
                os.close(self._fds.pop(path)[0])

    def read_range(self, relpath: str, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset`; StorageError on a short read or I/O error."""
        path = self.url(relpath)
        with self._fd(path) as fd:
            return self._pread(path, fd, offset, length)

    def _pread(self, path: str, fd: int, offset: int, length: int) -> bytes:
        if not self._start_read(offset, length):
            return b""
        chunks, got = [], 0
        while got < length:
            try:
                chunk = os.pread(fd, length - got, offset + got)
            except OSError as e:
                raise StorageError(f"{path}: read failed at offset {offset + got}: {e.strerror}") from e
            if not chunk:  # name the true size: the read may have started past the end of the file
                raise StorageError(f"{path}: short read at offset {offset}: "
                                   f"file ends at {os.fstat(fd).st_size}, wanted {length} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read_range_into(self, relpath: str, offset: int, buffer: memoryview) -> memoryview:
        """Fill `buffer` with the `len(buffer)` bytes at `offset` and return it: a read into memory the caller
        reuses (`corgi_io.reading.buffers`); StorageError on a short read or I/O error."""
        path, length, got = self.url(relpath), len(buffer), 0
        if not self._start_read(offset, length):
            return buffer
        with self._fd(path) as fd:
            while got < length:
                try:
                    n = os.preadv(fd, [buffer[got:]], offset + got)
                except OSError as e:
                    raise StorageError(f"{path}: read failed at offset {offset + got}: {e.strerror}") from e
                if not n:
                    raise StorageError(f"{path}: short read at offset {offset}: "
                                       f"file ends at {os.fstat(fd).st_size}, wanted {length} bytes")
                got += n
        return buffer

    def read_all(self, relpath: str) -> bytes:
        """The whole file (manifest, index sidecars); not counted in `reads`."""
        self._refuse_outside(self.url(relpath))
        with open(self.url(relpath), "rb") as f:
            return f.read()

    def size(self, relpath: str) -> int:
        """The file's size, from stat."""
        return os.stat(self.url(relpath)).st_size

    def exists(self, relpath: str) -> bool:
        """Whether the path exists."""
        return os.path.exists(self.url(relpath))

    def local_path(self, relpath: str) -> str:
        """The file itself: local packs memory-map their manifest columns."""
        return self.url(relpath)

    def close(self) -> None:
        with self._lock:
            self._close_idle(0)

    def __getstate__(self):
        return {**super().__getstate__(), "_fds": OrderedDict()}

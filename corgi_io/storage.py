"""Ranged reads of shard files in place (atomic writes live in corgi_io.atomic).

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
import threading
from collections import OrderedDict
from urllib.parse import urlsplit

from corgi_io.arguments import check_storage_options
from corgi_io.errors import ArgumentError, StorageError


HTTP_OPTIONS = {"headers", "timeout", "retry_seconds", "open_retry_seconds", "backoff", "max_backoff"}


def open_storage(root: str, **storage_options) -> Storage:
    """LocalStorage for a path or file:// URL; HttpStorage (urllib3) for http(s); else FsspecStorage.

    `backend="fsspec"` forces fsspec for http(s), as does any option HttpStorage does not take
    (`client_kwargs`, ...: they are fsspec's); `headers`, `timeout` and the retry settings are
    HttpStorage's own. Local storage ignores the options, so one `storage_options` serves a
    dataset wherever it lives (the retry settings are checked wherever it lives).
    """
    root = os.fspath(root)
    check_storage_options(storage_options)
    backend = storage_options.pop("backend", None)
    if backend not in (None, "fsspec", "urllib3"):
        raise ArgumentError(f"backend must be 'fsspec' or 'urllib3', not {backend!r}")
    if "://" not in root:
        return LocalStorage(root)
    parts = urlsplit(root)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"{root}: file:// URL with a remote host is not supported")
        return LocalStorage(parts.path)
    if parts.scheme in ("http", "https") and backend != "fsspec" and \
            (backend == "urllib3" or set(storage_options) <= HTTP_OPTIONS):
        from corgi_io.http_storage import HttpStorage  # urllib3 only for remote packs

        return HttpStorage(root, **storage_options)
    from corgi_io.remote_storage import FsspecStorage  # aiohttp and fsspec only for remote packs (~20 MB, 0.2 s)

    return FsspecStorage(root, **storage_options)


class Storage:
    """Root, counters, and the pid owning cached handles: a new process (a forked
    DataLoader worker, or an unpickled copy) rebuilds its handles on first use."""

    def __init__(self, root: str):
        self.root = root.rstrip("/") or "/"
        self.reads = self.bytes_read = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()  # the loader reads from several threads at once

    def url(self, relpath: str) -> str:
        """Full path or URL of `relpath` under the root, as named in errors."""
        return f"{self.root.rstrip('/')}/{relpath.lstrip('/')}"

    def _start_read(self, offset: int, length: int) -> bool:
        """Validate a range and count it; False for an empty read, which touches nothing."""
        if offset < 0 or length < 0:
            raise ArgumentError(f"bad range: offset={offset} length={length}")
        if length:
            with self._lock:
                self.reads += 1
                self.bytes_read += length
        return length > 0

    def _forked(self) -> bool:
        """True, once, when first used in a process other than the last one (call under `_lock`)."""
        pid, self._pid = self._pid, os.getpid()
        return pid != self._pid

    def __getstate__(self):
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state, _lock=threading.Lock())

    def close(self) -> None:
        """Release cached handles; the object stays usable and reopens on demand."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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

    def read_all(self, relpath: str) -> bytes:
        """The whole file (manifest, index sidecars); not counted in `reads`."""
        self._refuse_outside(self.url(relpath))
        with open(self.url(relpath), "rb") as f:
            return f.read()

    def size(self, relpath: str) -> int:
        return os.stat(self.url(relpath)).st_size

    def exists(self, relpath: str) -> bool:
        return os.path.exists(self.url(relpath))

    def close(self) -> None:
        with self._lock:
            self._close_idle(0)

    def __getstate__(self):
        return {**super().__getstate__(), "_fds": OrderedDict()}

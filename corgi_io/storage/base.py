"""The Storage contract: what every backend (local, HTTP, fsspec) offers the manifest, the readers and verify."""
from __future__ import annotations

import os
import threading
from corgi_io.errors import ArgumentError



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

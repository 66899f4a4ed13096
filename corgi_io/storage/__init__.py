"""Where packs live: `open_storage(root)` picks the backend for a path or URL; every backend is a `Storage`."""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from corgi_io.arguments import check_storage_options
from corgi_io.errors import ArgumentError, StorageError
from corgi_io.storage.base import Storage
from corgi_io.storage.local import LocalStorage

__all__ = ["LocalStorage", "Storage", "open_storage"]

HTTP_OPTIONS = {"headers", "timeout", "deadline", "retry_seconds", "open_retry_seconds", "backoff", "max_backoff",
                "max_requests"}


def open_storage(root: str, **storage_options) -> Storage:
    """LocalStorage for a path or file:// URL; HttpStorage (urllib3) for http(s); else FsspecStorage.

    `backend="fsspec"` forces fsspec for http(s), as does any option HttpStorage does not take
    (`client_kwargs`, ...: they are fsspec's); `headers`, `timeout`, `deadline`, `max_requests` and the
    retry settings are HttpStorage's own. Local storage ignores the options, so one `storage_options` serves a
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
        from corgi_io.storage.http import HttpStorage  # urllib3 only for remote packs

        return HttpStorage(root, **storage_options)
    from corgi_io.storage.remote import FsspecStorage  # aiohttp and fsspec only for remote packs (~20 MB, 0.2 s)

    return FsspecStorage(root, **storage_options)

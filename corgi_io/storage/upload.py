"""Writing to an object store (S3): whole files put under their final names, and one conditional create.

An object store has no rename, but a PUT is atomic: an object appears whole or not at all.  So a
file is uploaded once it is complete on the local disk, straight under its final name.  A file of
two parts or more goes up as a multipart upload of `part_bytes` parts (default PART_BYTES; s3fs
sends several at once and completes the upload only when every part is in), so a reader never sees
a part of it either.  `create` is a conditional write (S3's ``If-None-Match: *``): it fails when the
object exists, so of two writers exactly one creates it (the lock of `corgi pack`, object_lock.py).

Every failure is a one-line StorageError naming the URL (a missing object, where it is asked
for, reads as None).  fsspec and s3fs are imported only when an ObjectWriter is first used.
"""
from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

from corgi_io.errors import ArgumentError, CorgiError, StorageError
from corgi_io.storage.s3 import S3_SCHEMES, endpoint_hint

PART_BYTES = 64 << 20    # a multipart upload's part: 8 parts for a default 512 MiB shard, several sent at once
MIN_PART_BYTES = 5 << 20  # S3's smallest part (but the last)
WRITE_OPTIONS = ("part_bytes",)  # corgi-io's own options of a remote OUTPUT; the others are fsspec's (s3fs's)
_FILESYSTEMS = {}  # (pid, url, options) -> (filesystem, root path): one client per process, not one per task


def is_object_store(path) -> bool:
    """Whether `path` is a URL of a store that a pack can be written to (s3://, s3a://)."""
    return urlsplit(os.fspath(path)).scheme in S3_SCHEMES


def read_options(storage_options: dict | None) -> dict:
    """`storage_options` without those that only writing takes (WRITE_OPTIONS): what a reader of the pack gets."""
    return {key: value for key, value in (storage_options or {}).items() if key not in WRITE_OPTIONS}


class ObjectWriter:
    """Writes the objects under `url` (s3://bucket/prefix) with the fsspec `storage_options` (``endpoint_url``,
    ``key``, ...; ``part_bytes``: the multipart part size).  Picklable: each process builds its own client."""

    def __init__(self, url: str, storage_options: dict | None = None):
        if not is_object_store(url):
            raise ArgumentError(f"{url}: a pack can be written to a local folder or s3://bucket/prefix, not to "
                                f"{urlsplit(url).scheme}://")
        options = dict(storage_options or {})
        self.part_bytes = options.pop("part_bytes", PART_BYTES)
        if type(self.part_bytes) is not int or self.part_bytes < MIN_PART_BYTES:
            raise ArgumentError(f"part_bytes must be an int >= {MIN_PART_BYTES} (S3's smallest part), "
                                f"got {self.part_bytes!r}")
        self.url, self.options = url.rstrip("/"), options
        self._fs = self._root = self._pid = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fs": None, "_root": None, "_pid": None}

    def url_of(self, relpath: str) -> str:
        return f"{self.url}/{relpath}"

    @property
    def fs(self):
        """This process's filesystem for these options: made once per process (an s3fs client is not shared across
        a fork) and kept for the tasks that follow, each of which gets its own unpickled copy of this writer."""
        if self._fs is None or self._pid != os.getpid():
            key = (os.getpid(), self.url, json.dumps(self.options, sort_keys=True, default=repr))
            if key not in _FILESYSTEMS:
                import fsspec.core

                _FILESYSTEMS[key] = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **self.options)
            (self._fs, self._root), self._pid = _FILESYSTEMS[key], os.getpid()
        return self._fs

    def _path(self, relpath: str) -> str:
        self.fs  # noqa: B018  (sets _root)
        return f"{self._root.rstrip('/')}/{relpath}"

    def _call(self, what: str, relpath: str, method: str, *args, **kwargs):
        """fs.<method>(*args, **kwargs), `relpath`'s path in them as "{path}"; a failure as a StorageError naming
        its URL (FileNotFoundError and FileExistsError as they are, for the caller to judge)."""
        path = self._path(relpath)
        try:
            return getattr(self.fs, method)(*(path if arg == "{path}" else arg for arg in args), **kwargs)
        except (CorgiError, FileNotFoundError, FileExistsError):
            raise
        except Exception as exc:  # s3fs's OSErrors, botocore's own (no credentials, no connection), aiohttp's
            raise self._failed(self.url_of(relpath), what, exc) from exc

    def _failed(self, where: str, what: str, exc: BaseException) -> StorageError:
        """One line: what failed where, why, and how to set an endpoint when that is why."""
        hint = endpoint_hint(self._fs, exc)
        first = next(iter(str(exc).splitlines()), "")
        return StorageError(f"{where}: {what} failed: {type(exc).__name__}: {first}{'; ' + hint if hint else ''}")

    def put(self, local, relpath: str) -> None:
        """Upload the local file `local` as `relpath`, in `part_bytes` parts when it has two or more."""
        try:
            self._call("upload", relpath, "put_file", os.fspath(local), "{path}", chunksize=self.part_bytes)
        except FileNotFoundError as exc:  # the local file (the bucket's absence is an error of the store's)
            raise StorageError(f"{self.url_of(relpath)}: upload failed: {exc}") from exc

    def create(self, relpath: str, data: bytes) -> bool:
        """Write `relpath` only if no object has its name (``If-None-Match: *``); False when one has."""
        try:
            self._call("create", relpath, "pipe_file", "{path}", data, mode="create")
        except FileExistsError:
            return False
        except FileNotFoundError as exc:  # no such bucket
            raise StorageError(f"{self.url_of(relpath)}: create failed: {exc}") from exc
        return True

    def write(self, relpath: str, data: bytes) -> None:
        """Write `relpath` (replacing any object of that name)."""
        self._call("write", relpath, "pipe_file", "{path}", data)

    def read(self, relpath: str, limit: int) -> bytes | None:
        """The first `limit` bytes at most of `relpath`, or None when it is missing."""
        try:
            return self._call("read", relpath, "cat_file", "{path}", start=0, end=limit)
        except FileNotFoundError:
            return None

    def get(self, relpath: str, local) -> None:
        """Download `relpath` to the local file `local`."""
        try:
            self._call("download", relpath, "get_file", "{path}", os.fspath(local))
        except FileNotFoundError as exc:
            raise StorageError(f"{self.url_of(relpath)}: download failed: {exc}") from exc

    def sizes(self) -> dict:
        """{relpath: size} of every object under the URL, listed now (not from a cache)."""
        self.fs.invalidate_cache()
        root = self._path("").rstrip("/")
        try:
            found = self._call("list", "", "find", "{path}", detail=True)
        except FileNotFoundError:
            return {}
        return {path[len(root) + 1:]: info["size"] for path, info in found.items() if path.startswith(root + "/")}

    def delete(self, relpaths) -> None:
        """Delete the objects `relpaths` (missing ones are fine), a thousand to a request."""
        paths = [self._path(relpath) for relpath in relpaths]
        if not paths:
            return
        try:
            self.fs.rm(paths)
        except FileNotFoundError:
            pass
        except CorgiError:
            raise
        except Exception as exc:
            raise self._failed(f"{self.url} ({len(paths)} objects)", "delete", exc) from exc

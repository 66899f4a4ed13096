"""An OUTPUT in an object store (s3://bucket/pack): packed in a local staging folder, uploaded as it is finished.

The staging folder is an OUTPUT as output.py describes (``--staging DIR``, else a temporary folder
removed at the end).  The pack goes up in this order, so the store is always in one of the states
of a local OUTPUT:

1. ``.corgi-lock``, created with ``If-None-Match: *`` (storage/object_lock.py): one writer at a time;
2. ``.corgi-partial/plan.json``, the pack's identity, before any shard;
3. per unit, once its record is saved and its shards renamed into place (a shard is final only
   then): its shards and sidecars (multipart when large), then its record
   ``.corgi-partial/unit-<n>.rec``, so that a record in the store means its shards are whole there.
   The staged shards are then deleted: the staging folder holds only the shards being written.
   The worker that wrote the unit uploads it (`write_and_upload`), in a local pool or on Dask;
4. everything else the manifest writer left in the staging folder (``columns/``...), as opaque
   files, then ``manifest.json`` last: a reader that finds it finds the whole pack;
5. the partial folder's objects are deleted, then the lock.

A rerun (`RemoteOutput.open`) lists the store once and mirrors it into the staging folder: a
finished pack's head, or the plan and the records of a partial one.  The local rules then decide
as for a local OUTPUT: another pack's options are refused (a shard of a run with other options is
never reused), and a unit is done when its record is there and each of its shards is in the store
at its recorded size (`shard_size`).
"""
from __future__ import annotations

import contextlib
import functools
import re
import shutil
import tempfile
from pathlib import Path

from corgi_io.errors import PackError
from corgi_io.manifest import HEAD_NAME, INDEX_FILES, PACK_METADATA
from corgi_io.packing.output import PARTIAL_DIR, PLAN_NAME, SHARD_PATTERN
from corgi_io.packing.records import UnitDone
from corgi_io.packing.unit_task import WriteTask, write_unit
from corgi_io.storage.locks import LOCK_NAME
from corgi_io.storage.object_lock import ObjectLock
from corgi_io.storage.upload import ObjectWriter

__all__ = ["RemoteOutput", "remote_output", "write_and_upload"]


@contextlib.contextmanager
def remote_output(url: str, storage_options: dict | None, staging=None):
    """A RemoteOutput of `url` staged in the folder `staging` (made if missing), else in a temporary folder
    removed on exit."""
    writer = ObjectWriter(url, storage_options)
    if staging is not None:
        yield RemoteOutput(writer, Path(staging).absolute())
        return
    folder = Path(tempfile.mkdtemp(prefix="corgi-pack-staging-"))
    try:
        yield RemoteOutput(writer, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class RemoteOutput:
    """The pack at `writer`'s URL and its local `staging` folder (see the module docstring)."""

    def __init__(self, writer: ObjectWriter, staging: Path):
        self.writer, self.staging, self.url = writer, staging, writer.url
        self.listing = {}  # {relpath: size} of the store, as `open` found it
        self.lock = None

    def locked(self, warn) -> ObjectLock:
        """The store's lock, to hold for the whole run."""
        self.lock = ObjectLock(self.writer, warn)
        return self.lock

    def open(self, overwrite: bool) -> None:
        """List the store; refuse a foreign one (unless `overwrite`, which deletes the pack there); mirror its
        finished head, or its partial folder, into the staging folder."""
        self.listing = {path: size for path, size in self.writer.sizes().items() if path != LOCK_NAME}
        partial = [path for path in self.listing if path.startswith(PARTIAL_DIR + "/")]
        unsafe = next((path for path in partial if not _partial_name(path)), None)
        if unsafe is not None:  # it would be downloaded to a path of its choosing
            raise PackError(f"{self.writer.url_of(unsafe)}: not a name a pack writes in {PARTIAL_DIR}/; remove it, "
                            "or pass --overwrite")
        foreign = sorted(path for path in self.listing if not _ours(path))
        if foreign and not overwrite and HEAD_NAME not in self.listing and f"{PARTIAL_DIR}/{PLAN_NAME}" not in partial:
            raise PackError(f"{self.url}: not empty and holds no corgi pack ({self.writer.url_of(foreign[0])}...); "
                            "choose an empty OUTPUT or pass --overwrite")
        local_partial = self.staging / PARTIAL_DIR
        shutil.rmtree(local_partial, ignore_errors=True)  # the store's is the truth: a staged record's shards
        (self.staging / HEAD_NAME).unlink(missing_ok=True)  # may never have gone up
        if overwrite or HEAD_NAME in self.listing:  # a partial folder beside a head is a killed clean-up's
            self.writer.delete(partial)
        if overwrite:
            self.writer.delete(sorted(path for path in self.listing if (_ours(path) or _index_file(path))
                                      and path not in partial))
            self.listing = {}
        elif HEAD_NAME in self.listing:
            self.writer.get(HEAD_NAME, self.staging / HEAD_NAME)
        elif partial:
            local_partial.mkdir()
            for path in sorted(partial, key=lambda path: path.endswith(PLAN_NAME)):  # the plan last: whole
                self.writer.get(path, self.staging / path)

    def upload_plan(self, partial: Path) -> None:
        """Upload the plan of the partial folder `partial`, unless the store has it (a resumed pack)."""
        name = f"{PARTIAL_DIR}/{PLAN_NAME}"
        if name not in self.listing:
            self.writer.put(partial / PLAN_NAME, name)

    def shard_size(self, name: str) -> int:
        """The size of shard `name` in the store when it was listed (OSError when it was not there)."""
        size = self.listing.get(name)
        if size is None:
            raise FileNotFoundError(self.writer.url_of(name))
        return size

    def task_function(self):
        """What the executor runs for each unit: `write_and_upload` with this store's writer."""
        return functools.partial(write_and_upload, self.writer)

    def publish(self) -> None:
        """Upload what the manifest writer left in the staging folder, the head last; then delete the partial
        folder's objects.  The lock is checked first: a run that lost it publishes nothing."""
        if self.lock is not None:
            self.lock.check()
        files = sorted(path for name in PACK_METADATA if name != HEAD_NAME
                       for path in _files(self.staging / name))
        for path in [*files, self.staging / HEAD_NAME]:
            self.writer.put(path, path.relative_to(self.staging).as_posix())
        self.writer.delete(sorted(path for path in self.writer.sizes() if path.startswith(PARTIAL_DIR + "/")))


def write_and_upload(writer: ObjectWriter, task: WriteTask) -> UnitDone:
    """Pack one unit into the staging folder (`write_unit`), upload its shards and sidecars, then its record, and
    delete the staged shards.  Runs in a worker: locally, or on Dask (the staging folder must then be one the
    driver and every worker share, as OUTPUT must be for a local pack)."""
    output, record = Path(task.output), Path(task.record)
    done = write_unit(task)
    shards = [path for name in done.shards for path in (output / name, *sorted(output.glob(f"{name}.*")))]
    for path in shards:
        writer.put(path, path.name)
    writer.put(record, f"{PARTIAL_DIR}/{record.name}")
    for path in shards:
        path.unlink(missing_ok=True)
    return done


def _partial_name(path: str) -> bool:
    """Whether `path` is one file right inside the partial folder, named as a pack names its files there."""
    name = path[len(PARTIAL_DIR) + 1:]
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}", name) is not None and ".." not in name


def _ours(path: str) -> bool:
    """Whether an object belongs to a pack: the partial folder, a shard or sidecar, the manifest's files."""
    top = path.split("/", 1)[0]
    return top == PARTIAL_DIR or Path(top).match(SHARD_PATTERN) or top in PACK_METADATA


def _index_file(path: str) -> bool:
    """Whether an object is another reader's index file beside the shards (`.nv-meta/`, `shardindex.json`), which
    describes the pack there and goes with it on --overwrite (a store holding only these is still foreign)."""
    return path.split("/", 1)[0] in INDEX_FILES


def _files(path: Path) -> list:
    """The files at `path` (itself, or under it), not hidden (no writer's temporary file)."""
    if path.is_file():
        return [path]
    return [found for found in path.rglob("*") if found.is_file() and not found.name.startswith(".")] \
        if path.is_dir() else []

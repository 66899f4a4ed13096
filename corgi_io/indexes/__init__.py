"""Index files for other readers, written beside a WebDataset pack from its manifest: what each reader's own
indexing tool would write, so that it reads a corgi pack without a pass over the shards of its own.

One module per reader, chosen from the registry INDEX_MODULES (a new reader is one entry), each offering
``write(manifest, storage, folder) -> [paths written, relative to the pack's root]``, and optionally ``COMMIT``, the
file that says its index is complete (a reader takes it as such), which `write_indexes` removes from the pack before
anything is written and `write` writes last, so that a crash part-way never pairs an old one with new files:

* ``wids`` - wids' ``shardindex.json`` (``widsindex create``), from the manifest alone;
* ``dali`` - DALI's ``.idx`` per shard (``wds2idx``), from every tar member's place (`members`);
* ``energon`` - Energon's ``.nv-meta/`` and ``.tar.idx`` per shard (``energon prepare``), from the same.

`write_indexes` is what ``corgi index PACK --for wids,dali`` and ``corgi pack ... --index wids,dali`` call.
"""
from __future__ import annotations

import contextlib
import importlib
import os

from corgi_io.arguments import choose
from corgi_io.errors import ArgumentError

INDEX_MODULES = {"wids": "corgi_io.indexes.wids", "dali": "corgi_io.indexes.dali",
                 "energon": "corgi_io.indexes.energon"}
INDEXES = tuple(INDEX_MODULES)


def parse_indexes(text) -> tuple:
    """'wids,dali' (or a sequence of names) -> ('wids', 'dali'), each once; ArgumentError naming the choices."""
    names = [name.strip() for name in text.split(",")] if isinstance(text, str) else list(text)
    names = [name for name in names if name]
    if not names:
        raise ArgumentError(f"--index/--for needs at least one of {INDEXES}, got {text!r}")
    for name in names:
        choose("index", name, INDEX_MODULES)
    return tuple(dict.fromkeys(names))


def write_indexes(pack, indexes, storage_options: dict | None = None) -> dict:
    """Write the index files of each of `indexes` ('wids,dali' or names) beside the WebDataset pack `pack` (a
    local folder, an s3:// URL or an opened Manifest): {index name: [paths written, relative to the pack's root]}.

    Local files are written atomically in place; for a pack in S3 they are written to a temporary folder, then
    each is uploaded whole (`ObjectWriter`: an object appears complete or not at all).  ArgumentError for a pack
    of another format or in another store; FormatError naming the shard, byte offset and key when a shard
    disagrees with the manifest (`members`).
    """
    from corgi_io.manifest import open_manifest
    from corgi_io.storage import open_storage
    from corgi_io.storage.upload import is_object_store, read_options

    names = parse_indexes(indexes)
    manifest = open_manifest(pack, read_options(storage_options))
    if manifest.format != "wds":
        raise ArgumentError(f"{manifest.root}: {', '.join(names)} index files are for WebDataset (tar) packs; "
                            f"this pack's format is {manifest.format}")
    with open_storage(manifest.root, **read_options(storage_options)) as storage:
        folder = storage.local_path("")
        if folder is not None:
            for relpath in _commits(names):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{folder.rstrip('/')}/{relpath}")
            return _write(manifest, storage, folder.rstrip("/"), names)
        if not is_object_store(manifest.root):
            raise ArgumentError(f"{manifest.root}: index files are written beside a pack in a local folder or in "
                                f"S3 (s3://); index a local copy of this one")
        return _write_and_upload(manifest, storage, names, storage_options)


def _commits(names: tuple) -> list:
    """The COMMIT files of the index modules of `names`, relative to the pack's root."""
    modules = (importlib.import_module(INDEX_MODULES[name]) for name in names)
    return [module.COMMIT for module in modules if hasattr(module, "COMMIT")]


def _write(manifest, storage, folder: str, names: tuple) -> dict:
    """Each index of `names` written under `folder`: {name: [relative paths]}."""
    return {name: importlib.import_module(INDEX_MODULES[name]).write(manifest, storage, folder) for name in names}


def _write_and_upload(manifest, storage, names: tuple, storage_options: dict | None) -> dict:
    """`_write` into a temporary folder, then each file uploaded beside the S3 pack under its relative path."""
    import tempfile

    from corgi_io.storage.upload import ObjectWriter

    writer = ObjectWriter(manifest.root, storage_options)
    writer.delete(_commits(names))
    with tempfile.TemporaryDirectory(prefix="corgi-index-") as staging:
        written = _write(manifest, storage, staging, names)
        for relpath in (relpath for paths in written.values() for relpath in paths):
            writer.put(f"{staging}/{relpath}", relpath)
    return written

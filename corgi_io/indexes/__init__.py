"""Index files for other readers, written beside a WebDataset pack from its manifest: what each reader's own
indexing tool would write, so that it reads a corgi pack without a pass over the shards of its own.

One module per reader, chosen from the registry INDEX_MODULES (a new reader is one entry), each offering
``write(manifest, storage, folder) -> [paths written, relative to the pack's root]``:

* ``wids`` - wids' ``shardindex.json`` (``widsindex create``), from the manifest alone;
* ``dali`` - DALI's ``.idx`` per shard (``wds2idx``), from every tar member's place (`members`).

`write_indexes` is what ``corgi index PACK --for wids,dali`` and ``corgi pack ... --index wids,dali`` call.
"""
from __future__ import annotations

import importlib

from corgi_io.arguments import choose
from corgi_io.errors import ArgumentError

INDEX_MODULES = {"wids": "corgi_io.indexes.wids", "dali": "corgi_io.indexes.dali"}
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
    local folder or an opened Manifest): {index name: [paths written, relative to the pack's root]}.

    ArgumentError for a pack of another format or one that is not in a local folder; FormatError naming the
    shard, byte offset and key when a shard disagrees with the manifest (`members`).
    """
    from corgi_io.manifest import open_manifest
    from corgi_io.storage import open_storage

    names = parse_indexes(indexes)
    manifest = open_manifest(pack, storage_options)
    if manifest.format != "wds":
        raise ArgumentError(f"{manifest.root}: {', '.join(names)} index files are for WebDataset (tar) packs; "
                            f"this pack's format is {manifest.format}")
    with open_storage(manifest.root, **dict(storage_options or {})) as storage:
        folder = storage.local_path("")
        if folder is None:
            raise ArgumentError(f"{manifest.root}: index files are written beside a pack in a local folder; "
                                f"write them beside a local copy and upload them with the pack")
        return {name: importlib.import_module(INDEX_MODULES[name]).write(manifest, storage, folder.rstrip("/"))
                for name in names}

"""The dataset manifest: the contract between `corgi pack` and everything that reads a pack.

A pack directory holds, beside its shards:

* ``manifest.json`` - the head: format version, shard format, creation options, label and
  extension indexes, the checksum function, shards, skipped inputs, and the row counts of
  the columns.  Human-readable.
* ``columns/<name>.npy`` - one flat, uncompressed array per per-sample or per-block column
  (and the keys as one UTF-8 blob plus offsets).  Local packs memory-map them, so opening a
  pack does not copy them and every process on a node shares one page cache.

The columns are written first and the head last, each atomically, so a head on disk always
describes complete columns.  Every input is untrusted: the head is type-checked, every
column's dtype, length and file size must match the schema and the head before it is read,
and the columns are validated against each other.  Any problem raises :class:`ManifestError`
with one line naming the file.  Version-1 packs (one ``manifest.npz``, zlib CRC32) still open.

What a reader tolerates, on purpose: head fields it does not know are ignored (a change that
older readers must not ignore bumps ``corgi_manifest_version``); ``options`` is opaque (only a
resumed `corgi pack` compares it); files in ``columns/`` that the schema does not name are
never opened.  A local manifest file may be a symlink only to a regular file inside the pack
root.  Shard files are not looked at here (that would be one stat per shard): their paths must
be safe relative paths, and the readers check their sizes on first read.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corgi_io.column_files import column_from_bytes, local_file_size, map_local_column, most_bytes, read_npz_members
from corgi_io.errors import ManifestError
from corgi_io.manifest_checks import FORMATS, KINDS, MAX_HEAD_BYTES, parse_head, validate

__all__ = ["FORMATS", "KINDS", "MANIFEST_VERSION", "Manifest", "ManifestError", "open_manifest", "save_manifest"]

MANIFEST_VERSION = 2
HEAD_NAME = "manifest.json"
COLUMNS_DIR = "columns"
V1_COLUMNS_NAME = "manifest.npz"
PACK_METADATA = (HEAD_NAME, COLUMNS_DIR, V1_COLUMNS_NAME)  # everything in OUTPUT that is not a shard

SAMPLE_COLUMNS = {
    "label": np.int32,        # class id into the head's labels, -1 when unlabeled
    "kind": np.uint8,         # index into KINDS
    "ext": np.uint16,         # index into the head's extensions (the original file's, lower case)
    "bytes": np.int64,        # payload bytes (the original file, unchanged)
    "size": np.int64,         # work units: pixels, frames, tokens or a custom size
    "shard": np.int32,        # index into head["shards"]
    "offset": np.int64,       # record start in the shard (tar headers / TFRecord framing included)
    "length": np.int64,       # record length
    "data_offset": np.int64,  # payload start in the shard
    "checksum": np.uint32,    # head["checksum"] of the record bytes, checked by the loader and `corgi verify`
}
BLOCK_COLUMNS = {
    "shard": np.int32,
    "offset": np.int64,
    "length": np.int64,
    "first": np.int64,        # first sample index (global)
    "count": np.int64,
    "size_sum": np.int64,
}
KEY_COLUMNS = {"key_blob": np.uint8, "key_offsets": np.int64}


@dataclass(frozen=True)
class Shard:
    """One shard file: its path relative to the dataset root, size and sample range."""

    path: str
    bytes: int
    first_sample: int
    samples: int


@dataclass(frozen=True)
class Columns:
    """A set of equal-length numpy arrays addressed by attribute (``samples.size``)."""

    arrays: dict

    def __getattr__(self, name):
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self):
        return len(next(iter(self.arrays.values()))) if self.arrays else 0


@dataclass(frozen=True)
class Manifest:
    """An opened pack: head fields plus per-sample (`samples`) and per-block (`blocks`) columns."""

    root: str
    version: int
    format: str
    checksum: str
    options: dict
    labels: list
    extensions: list
    shards: list
    skipped: list
    samples: Columns
    blocks: Columns
    key_blob: np.ndarray = field(repr=False)
    key_offsets: np.ndarray = field(repr=False)

    @property
    def num_samples(self) -> int:
        return len(self.key_offsets) - 1

    def key(self, index: int) -> str:
        """The key of sample `index`, decoded on demand."""
        lo, hi = self.key_offsets[index], self.key_offsets[index + 1]
        return self.key_blob[lo:hi].tobytes().decode("utf-8")

    def keys(self, start: int = 0, stop: int | None = None) -> list:
        """The keys of samples [start, stop), decoded in one pass (all keys by default)."""
        stop = self.num_samples if stop is None else stop
        bounds = self.key_offsets[start:stop + 1]
        blob, bounds = self.key_blob[bounds[0]:bounds[-1]].tobytes(), (bounds - bounds[0]).tolist()
        return [blob[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]

    def kind_name(self, index: int) -> str:
        return KINDS[int(self.samples.kind[index])]


def encode_keys(keys) -> tuple:
    """Pack a sequence of str keys into (uint8 blob, int64 offsets of length n+1); a packed pair passes through."""
    if isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(part, np.ndarray) for part in keys):
        return keys
    encoded = [k.encode("utf-8") for k in keys]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets


def column_path(name: str) -> str:
    """Path of column `name` (e.g. "sample_size") relative to the pack root."""
    return f"{COLUMNS_DIR}/{name}.npy"


def column_schema() -> dict:
    """{column file name: dtype} of every column of the current version."""
    return {**{f"sample_{n}": t for n, t in SAMPLE_COLUMNS.items()},
            **{f"block_{n}": t for n, t in BLOCK_COLUMNS.items()}, **KEY_COLUMNS}


def _declared_rows(counts: dict) -> dict:
    """{column file name: rows} that a version-2 head's counts declare."""
    rows = {"key_blob": counts["key_bytes"], "key_offsets": counts["samples"] + 1}
    rows.update({f"sample_{n}": counts["samples"] for n in SAMPLE_COLUMNS})
    rows.update({f"block_{n}": counts["blocks"] for n in BLOCK_COLUMNS})
    return rows


def save_manifest(root, head: dict, samples: dict, blocks: dict, keys) -> None:
    """Write every column then the head, each atomically (temporary name, then rename)."""
    from corgi_io.atomic import atomic_output

    root = Path(root)
    key_blob, key_offsets = encode_keys(keys)
    arrays = {**{f"sample_{n}": samples[n] for n in SAMPLE_COLUMNS}, **{f"block_{n}": blocks[n] for n in BLOCK_COLUMNS},
              "key_blob": key_blob, "key_offsets": key_offsets}
    (root / COLUMNS_DIR).mkdir(exist_ok=True)
    for name, dtype in column_schema().items():
        with atomic_output(root / column_path(name)) as f:
            np.save(f, np.ascontiguousarray(arrays[name], dtype=np.dtype(dtype).newbyteorder("<")),
                    allow_pickle=False)
    counts = {"samples": len(key_offsets) - 1, "blocks": len(blocks["first"]), "key_bytes": len(key_blob)}
    head = dict(head, corgi_manifest_version=MANIFEST_VERSION, counts=counts)
    with atomic_output(root / HEAD_NAME) as f:
        f.write(json.dumps(head, indent=1, ensure_ascii=False).encode("utf-8"))


def open_manifest(source, storage_options: dict | None = None) -> Manifest:
    """Open and validate the manifest of a pack at a local path or fsspec URL (or pass one through).

    `storage_options` go to `open_storage` (credentials, retry budgets).  Raises ManifestError,
    with one line naming the file, for anything missing or malformed, and StorageError when the
    storage itself cannot be reached.
    """
    if isinstance(source, Manifest):
        return source
    from corgi_io.storage import open_storage

    root = str(source)
    storage = open_storage(root, **(storage_options or {}))
    head_url = storage.url(HEAD_NAME)
    if not storage.exists(HEAD_NAME):
        raise ManifestError(f"{head_url}: no manifest here (is this the OUTPUT of `corgi pack`?)")
    head = parse_head(_read_whole(storage, HEAD_NAME, MAX_HEAD_BYTES), head_url)
    arrays = _read_v1_columns(storage, head) if head["version"] == 1 else _read_columns(storage, head)
    manifest = _build(root, head, arrays)
    validate(manifest, storage.url(COLUMNS_DIR if head["version"] > 1 else V1_COLUMNS_NAME))
    return manifest


def _read_whole(storage, relpath: str, most: int) -> bytes:
    """A whole manifest file of at most `most` bytes, its size checked before it is read.

    A missing, unreadable or oversized one is a ManifestError (so is a local one that is not a
    regular file inside the root); storage trouble is a StorageError.
    """
    from corgi_io.storage import LocalStorage

    where = storage.url(relpath)
    try:
        local = isinstance(storage, LocalStorage)
        size = local_file_size(where, storage.root, where) if local else storage.size(relpath)
        raw = b"" if size > most else storage.read_all(relpath)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        raise ManifestError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if max(size, len(raw)) > most:  # too big to read, or it grew (or a server's size was wrong)
        raise ManifestError(f"{where}: {max(size, len(raw))} bytes, more than the {most} it may hold")
    return raw


def _read_columns(storage, head: dict) -> dict:
    """The columns of a version-2 pack: memory-mapped when local, read whole when remote."""
    from corgi_io.storage import LocalStorage

    rows, arrays = _declared_rows(head["counts"]), {}
    for name, dtype in column_schema().items():
        url = storage.url(column_path(name))
        if isinstance(storage, LocalStorage):
            arrays[name] = map_local_column(url, storage.root, dtype, rows[name], url)
        else:
            raw = _read_whole(storage, column_path(name), most_bytes(dtype, rows[name]))
            arrays[name] = column_from_bytes(raw, dtype, rows[name], url)
    return arrays


def _read_v1_columns(storage, head: dict) -> dict:
    """The columns of a version-1 pack (one uncompressed npz, zlib CRC32, no extension column)."""
    where = storage.url(V1_COLUMNS_NAME)
    raw = _read_whole(storage, V1_COLUMNS_NAME, head["columns_bytes"])
    if len(raw) != head["columns_bytes"]:
        raise ManifestError(f"{where}: {len(raw)} bytes, head says {head['columns_bytes']}")
    members = read_npz_members(raw, where)
    renamed = {"sample_checksum": "sample_crc32"}
    arrays = {}
    for name, dtype in column_schema().items():
        if name == "sample_ext":
            continue
        member = members.get(renamed.get(name, name))
        if member is None:
            raise ManifestError(f"{where}: missing column {renamed.get(name, name)!r}")
        arrays[name] = column_from_bytes(member, dtype, None, f"{where}: column {renamed.get(name, name)!r}")
    rows = max(len(arrays["key_offsets"]) - 1, 0)  # no offsets at all: validate() refuses them
    arrays["sample_ext"] = np.zeros(rows, dtype=np.uint16)  # extension unknown: ""
    return arrays


def _build(root: str, head: dict, arrays: dict) -> Manifest:
    samples = Columns({n: arrays[f"sample_{n}"] for n in SAMPLE_COLUMNS})
    blocks = Columns({n: arrays[f"block_{n}"] for n in BLOCK_COLUMNS})
    return Manifest(root=root, version=head["version"], format=head["format"], checksum=head["checksum"],
                    options=head["options"], labels=head["labels"], extensions=head["extensions"],
                    shards=[Shard(*s) for s in head["shards"]], skipped=head["skipped"], samples=samples,
                    blocks=blocks, key_blob=arrays["key_blob"], key_offsets=arrays["key_offsets"])

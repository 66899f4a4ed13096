"""The dataset manifest: the contract between `corgi pack` and everything that reads a pack.

A pack directory holds two manifest files beside its shards:

* ``manifest.json`` - the head: format version, shard format, creation options, label
  index, shards, skipped inputs, and the name/size of the column file.  Human-readable.
* ``manifest.npz`` - the per-sample and per-block columns as plain numpy arrays
  (``np.load`` with object arrays refused: data, never code).  Keys are stored as one UTF-8
  blob plus offsets, so a million keys load as two arrays instead of a million objects.

The column file is written first and the head last, both atomically, so a head on disk
always describes a complete pack.  Every load is validated; a problem raises
:class:`ManifestError` with a one-line message naming the file.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corgi_io.errors import ManifestError

MANIFEST_VERSION = 1
HEAD_NAME = "manifest.json"
COLUMNS_NAME = "manifest.npz"
FORMATS = ("wds", "tfrecord")
KINDS = ("image", "video", "text")

SAMPLE_COLUMNS = {
    "label": np.int32,        # class id, -1 when unlabeled
    "kind": np.uint8,         # index into KINDS
    "bytes": np.int64,        # payload bytes (the original file, unchanged)
    "size": np.int64,         # work units: pixels, frames, tokens or a custom size
    "shard": np.int32,        # index into head["shards"]
    "offset": np.int64,       # record start in the shard (tar headers / TFRecord framing included)
    "length": np.int64,       # record length
    "data_offset": np.int64,  # payload start in the shard
    "crc32": np.uint32,       # zlib.crc32 of the record bytes, checked by `corgi verify`
}
BLOCK_COLUMNS = {
    "shard": np.int32,
    "offset": np.int64,
    "length": np.int64,
    "first": np.int64,        # first sample index (global)
    "count": np.int64,
    "size_sum": np.int64,
}


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
    format: str
    options: dict
    labels: list
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
    """Pack a sequence of str keys into (uint8 blob, int64 offsets of length n+1)."""
    encoded = [k.encode("utf-8") for k in keys]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets


def save_manifest(root, head: dict, samples: dict, blocks: dict, keys) -> None:
    """Write the column file then the head, each atomically (temporary name, then rename)."""
    from corgi_io.storage import write_atomic

    root = Path(root)
    key_blob, key_offsets = encode_keys(keys)
    arrays = {f"sample_{n}": np.ascontiguousarray(samples[n], dtype=t) for n, t in SAMPLE_COLUMNS.items()}
    arrays.update({f"block_{n}": np.ascontiguousarray(blocks[n], dtype=t) for n, t in BLOCK_COLUMNS.items()})
    arrays["key_blob"], arrays["key_offsets"] = key_blob, key_offsets
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    columns = buffer.getvalue()
    write_atomic(root / COLUMNS_NAME, columns)
    head = dict(head, corgi_manifest_version=MANIFEST_VERSION,
                columns={"file": COLUMNS_NAME, "bytes": len(columns)})
    write_atomic(root / HEAD_NAME, json.dumps(head, indent=1, ensure_ascii=False).encode("utf-8"))


def open_manifest(source) -> Manifest:
    """Open and validate the manifest of a pack at a local path or fsspec URL (or pass one through)."""
    if isinstance(source, Manifest):
        return source
    from corgi_io.storage import open_storage

    root = str(source)
    storage = open_storage(root)
    head_url = storage.url(HEAD_NAME)
    if not storage.exists(HEAD_NAME):
        raise ManifestError(f"{head_url}: no manifest here (is this the OUTPUT of `corgi pack`?)")
    try:
        head = json.loads(storage.read_all(HEAD_NAME))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{head_url}: not valid JSON ({exc})") from None
    columns_url = storage.url(COLUMNS_NAME)
    _check_head(head, head_url)
    raw = storage.read_all(head["columns"]["file"])
    if len(raw) != head["columns"]["bytes"]:
        raise ManifestError(f"{columns_url}: {len(raw)} bytes, head says {head['columns']['bytes']}")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, KeyError) as exc:
        raise ManifestError(f"{columns_url}: unreadable column file ({exc})") from None
    manifest = _build(root, head, arrays, columns_url)
    validate(manifest, columns_url)
    return manifest


def _check_head(head: dict, where: str) -> None:
    if not isinstance(head, dict):
        raise ManifestError(f"{where}: the head is not a JSON object")
    version = head.get("corgi_manifest_version")
    if version != MANIFEST_VERSION:
        raise ManifestError(f"{where}: manifest version {version!r}, this corgi-io reads version {MANIFEST_VERSION}")
    for name in ("format", "options", "labels", "shards", "skipped", "columns"):
        if name not in head:
            raise ManifestError(f"{where}: missing field {name!r}")
    if head["format"] not in FORMATS:
        raise ManifestError(f"{where}: unknown shard format {head['format']!r}")


def _build(root: str, head: dict, arrays: dict, where: str) -> Manifest:
    def take(prefix, spec):
        out = {}
        for name, dtype in spec.items():
            array = arrays.get(prefix + name)
            if array is None:
                raise ManifestError(f"{where}: missing column {prefix + name!r}")
            if array.dtype != dtype or array.ndim != 1:
                raise ManifestError(f"{where}: column {prefix + name!r} is {array.dtype}{array.shape}, expected 1-D {np.dtype(dtype)}")
            out[name] = array
        return Columns(out)

    for name in ("key_blob", "key_offsets"):
        if name not in arrays:
            raise ManifestError(f"{where}: missing column {name!r}")
    try:
        shards = [Shard(s["path"], int(s["bytes"]), int(s["first_sample"]), int(s["samples"])) for s in head["shards"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{where}: malformed shard entry ({exc})") from None
    return Manifest(root=root, format=head["format"], options=head["options"], labels=list(head["labels"]),
                    shards=shards, skipped=list(head["skipped"]), samples=take("sample_", SAMPLE_COLUMNS),
                    blocks=take("block_", BLOCK_COLUMNS), key_blob=arrays["key_blob"],
                    key_offsets=arrays["key_offsets"])


def validate(m: Manifest, where: str) -> None:
    """Check that columns, blocks and shards agree; vectorised so a million samples cost milliseconds."""
    n, s, b = m.num_samples, m.samples, m.blocks

    def fail(message):
        raise ManifestError(f"{where}: {message}")

    if len(s) != n:
        fail(f"{len(s)} sample rows but {n} keys")
    if m.key_offsets[0] != 0 or m.key_offsets[-1] != len(m.key_blob) or np.any(np.diff(m.key_offsets) < 0):
        fail("key offsets do not index the key blob")
    shard_bytes = np.array([sh.bytes for sh in m.shards], dtype=np.int64)
    shard_first = np.array([sh.first_sample for sh in m.shards], dtype=np.int64)
    shard_count = np.array([sh.samples for sh in m.shards], dtype=np.int64)
    if shard_count.sum() != n or np.any(shard_first != np.concatenate([[0], np.cumsum(shard_count)[:-1]])):
        fail("shard sample ranges do not tile the samples")
    if n and (s.shard.min() < 0 or s.shard.max() >= len(m.shards)):
        fail("a sample names a shard that does not exist")
    if np.any(s.shard != np.repeat(np.arange(len(m.shards), dtype=np.int32), shard_count)):
        fail("sample shard ids disagree with the shard sample ranges")
    end = s.offset + s.length
    bad = np.flatnonzero((s.offset < 0) | (s.length <= 0) | (end > shard_bytes[s.shard]) if n else [])
    if len(bad):
        i = int(bad[0])
        fail(f"sample {i} ({m.key(i)!r}) spans bytes {s.offset[i]}..{end[i]} but shard "
             f"{m.shards[s.shard[i]].path} has {shard_bytes[s.shard[i]]} bytes")
    bad = np.flatnonzero((s.data_offset < s.offset) | (s.data_offset + s.bytes > end))
    if len(bad):
        fail(f"sample {int(bad[0])} ({m.key(int(bad[0]))!r}): payload lies outside its record")
    if n and np.any((s.label < -1) | (s.label >= max(len(m.labels), 0))):
        fail("a label id is outside the label index")
    if n and s.kind.max() >= len(KINDS):
        fail("an unknown sample kind code")
    if b.count.sum() != n or np.any(b.count <= 0) or np.any(b.first != np.concatenate([[0], np.cumsum(b.count)[:-1]])):
        fail("block sample ranges do not tile the samples")
    if len(b.first) == 0:
        return
    last = b.first + b.count - 1
    if np.any(s.shard[b.first] != b.shard) or np.any(s.shard[last] != b.shard):
        fail("a block crosses a shard boundary")
    if np.any(b.offset != s.offset[b.first]) or np.any(b.offset + b.length != end[last]):
        fail("block byte ranges disagree with their samples")
    inner = np.ones(n, dtype=bool)
    inner[b.first] = False  # contiguous inside a block: each record starts where the previous ended
    if np.any(s.offset[1:][inner[1:]] != end[:-1][inner[1:]]):
        fail("samples inside a block are not contiguous")
    if np.any(np.add.reduceat(s.size, b.first) != b.size_sum):
        fail("block size sums disagree with sample sizes")

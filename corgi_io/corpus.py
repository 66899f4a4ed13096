"""Walking a raw corpus: which files, of which kind, with which label and key.

SOURCE is a folder tree (ImageFolder convention: the first folder under the root is the
class) or a listing file (CSV or JSONL with ``path`` and optional ``label`` and ``key``).
The walk is sorted, so the same tree always gives the same corpus.  Only ``stat`` is
called here; file contents are read later, in parallel, by the pack pipeline.
"""
from __future__ import annotations

import csv
from collections import Counter
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corgi_io.errors import CorpusError
from corgi_io.manifest import KINDS

EXTENSIONS = {
    "image": {"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"},
    "video": {"mp4", "avi", "mkv", "mov", "webm"},
    "text": {"txt", "md", "json", "jsonl"},
}
KIND_OF_EXTENSION = {ext: kind for kind, exts in EXTENSIONS.items() for ext in exts}
LISTING_SUFFIXES = {".csv", ".jsonl"}


@dataclass
class Corpus:
    """The files to pack, as parallel columns in a deterministic order."""

    paths: list = field(default_factory=list)      # absolute paths
    relpaths: list = field(default_factory=list)   # '/'-separated, relative to the corpus root
    exts: list = field(default_factory=list)       # lower-case extension: the tar member suffix
    kinds: list = field(default_factory=list)      # index into KINDS
    label_names: list = field(default_factory=list)  # per file: class name, or None
    keys: list = field(default_factory=list)
    nbytes: list = field(default_factory=list)
    mtimes: list = field(default_factory=list)
    skipped: list = field(default_factory=list)    # {"path", "reason"}
    labels: list = field(default_factory=list)     # the label index: id -> name

    def __len__(self):
        return len(self.paths)

    def label_ids(self) -> np.ndarray:
        """Per-file label id into `labels`, -1 for unlabeled files."""
        index = {name: i for i, name in enumerate(self.labels)}
        return np.array([index.get(name, -1) if name is not None else -1 for name in self.label_names], dtype=np.int32)

    def fingerprint(self) -> str:
        """A digest of the file list with sizes and mtimes: a resumed pack must see the same corpus."""
        digest = hashlib.sha256()
        for rel, size, mtime in zip(self.relpaths, self.nbytes, self.mtimes):
            digest.update(f"{rel}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()


def discover(source, kind: str = "auto", label_index=None) -> Corpus:
    """Walk SOURCE (folder or listing file) into a Corpus.

    `kind` forces every file to one kind instead of detecting it by extension.
    `label_index`, a list of class names, fixes the label ids; files of other classes are skipped.
    """
    source = Path(source)
    if not source.exists():
        raise CorpusError(f"{source}: no such file or directory")
    corpus = Corpus()
    if source.is_dir():
        entries = _walk_folder(source)
    elif source.suffix.lower() in LISTING_SUFFIXES:
        entries = _read_listing(source)
    else:
        raise CorpusError(f"{source}: not a folder, and not a .csv or .jsonl listing")
    for path, rel, label, key in entries:
        _add(corpus, path, rel, label, key, kind)
    if not corpus.paths:
        reasons = f" ({len(corpus.skipped)} files skipped, first: {corpus.skipped[0]})" if corpus.skipped else ""
        raise CorpusError(f"{source}: the corpus is empty{reasons}")
    _assign_labels(corpus, label_index)
    _make_keys_unique(corpus)
    return corpus


def _walk_folder(root: Path):
    top = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        folder = os.path.relpath(dirpath, top).replace(os.sep, "/")
        prefix = "" if folder == "." else folder + "/"
        label = prefix.split("/", 1)[0] or None
        for name in sorted(filenames):
            yield os.path.join(dirpath, name), prefix + name, label, None


def _read_listing(listing: Path):
    base = listing.parent
    with open(listing, newline="", encoding="utf-8") as f:
        if listing.suffix.lower() == ".csv":
            rows = list(csv.DictReader(f))
        else:
            try:
                rows = [json.loads(line) for line in f if line.strip()]
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{listing}: line {exc.lineno}: not JSON ({exc.msg})") from None
    for line, row in enumerate(rows, start=2 if listing.suffix.lower() == ".csv" else 1):
        if not isinstance(row, dict) or not row.get("path"):
            raise CorpusError(f"{listing}: row {line} has no 'path'")
        path = Path(row["path"]) if Path(row["path"]).is_absolute() else base / row["path"]
        rel = Path(row["path"]).as_posix().lstrip("/")
        label = row.get("label")
        yield str(path), rel, (str(label) if label not in (None, "") else None), row.get("key") or None


def _add(corpus: Corpus, path: str, rel: str, label, key, kind: str) -> None:
    name = rel.rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    ext = ext.lower() if dot and stem else ""
    if name.startswith("."):
        corpus.skipped.append({"path": rel, "reason": "hidden file"})
        return
    file_kind = kind if kind != "auto" else KIND_OF_EXTENSION.get(ext)
    if file_kind is None:
        corpus.skipped.append({"path": rel, "reason": f"unknown extension {ext!r}" if ext else "no extension"})
        return
    try:
        stat = os.stat(path)
    except OSError as exc:
        corpus.skipped.append({"path": rel, "reason": f"cannot stat: {exc.strerror}"})
        return
    corpus.paths.append(path)
    corpus.relpaths.append(rel)
    corpus.exts.append(ext or "bin")
    corpus.kinds.append(KINDS.index(file_kind))
    corpus.label_names.append(label)
    corpus.keys.append(key_from_path(key if key else (rel[: -len(ext) - 1] if ext else rel)))
    corpus.nbytes.append(stat.st_size)
    corpus.mtimes.append(stat.st_mtime_ns)


def key_from_path(stem: str) -> str:
    """A webdataset-safe key: the final path component may not contain '.', which starts the extension.

    '%' and '.' in the last component are percent-escaped, so the mapping stays injective
    and keys survive dots, spaces and unicode in file names.
    """
    head, slash, last = stem.rpartition("/")
    return head + slash + last.replace("%", "%25").replace(".", "%2E")


def _assign_labels(corpus: Corpus, label_index) -> None:
    names = {n for n in corpus.label_names if n is not None}
    if label_index is not None:
        corpus.labels = list(label_index)
        unknown = [i for i, n in enumerate(corpus.label_names) if n is not None and n not in set(label_index)]
        for i in reversed(unknown):
            corpus.skipped.append({"path": corpus.relpaths[i], "reason": f"label {corpus.label_names[i]!r} not in the label index"})
            _drop(corpus, i)
        if not corpus.paths:
            raise CorpusError("every file has a label outside the given label index")
    elif names and all(n.isdigit() for n in names):  # integer labels keep their own ids
        corpus.labels = [str(i) for i in range(max(int(n) for n in names) + 1)]
        corpus.label_names = [str(int(n)) if n is not None else None for n in corpus.label_names]
    else:
        corpus.labels = sorted(names)


def _drop(corpus: Corpus, index: int) -> None:
    for column in ("paths", "relpaths", "exts", "kinds", "label_names", "keys", "nbytes", "mtimes"):
        del getattr(corpus, column)[index]


def _make_keys_unique(corpus: Corpus) -> None:
    """Files that share a key (photo.JPG beside photo.png) keep their escaped extension in the key."""
    seen = {}
    for i, key in enumerate(corpus.keys):
        seen.setdefault(key, []).append(i)
    for key, indices in seen.items():
        if len(indices) > 1:
            for i in indices:
                corpus.keys[i] = key + "%2E" + corpus.relpaths[i].rsplit(".", 1)[-1]
    duplicates = [key for key, count in Counter(corpus.keys).items() if count > 1]
    if duplicates:
        raise CorpusError(f"duplicate key {duplicates[0]!r} in the listing")

"""Walking a raw corpus: which files, of which kind, with which label and key.

SOURCE is a folder tree (ImageFolder convention: the first folder under the root is the
class) or a listing file (CSV or JSONL with ``path`` and optional ``label`` and ``key``).
The walk is sorted, so the same tree always gives the same corpus.  Only ``stat`` is
called here; file contents are read later, in parallel, by the pack pipeline.

Every input gets an outcome: it is packed, or it is skipped with a one-line warning on
stderr and a record in the manifest.  Some skips follow a rule (hidden files and folders,
unknown extensions, symlinked folders, labels outside the label index); the others are
problems (a missing or unreadable file, something that is not a regular file, a listing
row whose key breaks the key rule), and `strict` turns the first problem into a CorpusError.

The key rule (docs/format.md): a key is a relative POSIX path with no empty, '.' or '..'
components, no control characters, and valid UTF-8.  A listing's keys must obey it as
written; a folder's file names are escaped into keys that obey it (see `key_from_path`).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from corgi_io.errors import CorpusError
from corgi_io.names import CONTROL_CHARACTERS as _CONTROL, key_problem
from corgi_io.manifest import KINDS

EXTENSIONS = {
    "image": {"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"},
    "video": {"mp4", "avi", "mkv", "mov", "webm"},
    "text": {"txt", "md", "json", "jsonl"},
}
KIND_OF_EXTENSION = {ext: kind for kind, exts in EXTENSIONS.items() for ext in exts}
LISTING_SUFFIXES = {".csv", ".jsonl"}
MAX_WARNINGS = 20  # skipped inputs warned one line each; the rest are counted in one line

_UNDECODABLE = "\udc80-\udcff"  # the bytes of a file name that are not UTF-8, as os.fsdecode gives them
_ESCAPED_IN_FOLDER = re.compile(f"[%{_CONTROL}{_UNDECODABLE}]")
_ESCAPED_IN_LAST = re.compile(f"[.%{_CONTROL}{_UNDECODABLE}]")
_UNPRINTABLE = re.compile(f"[{_CONTROL}\ud800-\udfff]")
_FILE_TYPES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


@dataclass
class Corpus:
    """The files to pack, as parallel columns in a deterministic order."""

    paths: list = field(default_factory=list)      # where each file is read from (absolute for a folder walk)
    relpaths: list = field(default_factory=list)   # printable name: the path in the folder, or as the listing wrote it
    exts: list = field(default_factory=list)       # lower-case, escaped extension: the tar member suffix
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
            digest.update(f"{rel}\0{size}\0{mtime}\n".encode("utf-8"))
        return digest.hexdigest()


class _Entry(NamedTuple):
    """One input found by a walk or a listing, before its kind and stat are known."""

    path: str             # where its bytes are read from
    name: str             # printable name for messages and the manifest
    stem: str             # the key before `key_from_path`: the path without its extension, or a listing's key
    label: str | None
    line: int | None      # the listing line, None in a folder walk


def discover(source, kind: str = "auto", label_index=None, strict: bool = False) -> Corpus:
    """Walk SOURCE (folder or listing file) into a Corpus.

    `kind` forces every file to one kind instead of detecting it by extension.
    `label_index`, a list of class names, fixes the label ids; files of other classes are skipped.
    Skipped inputs are warned on stderr and recorded in `Corpus.skipped`; with `strict`, an input
    that should have been packed but cannot be (see the module docstring) raises CorpusError.
    """
    source = Path(source)
    if not source.exists():
        raise CorpusError(f"{source}: no such file or directory")
    corpus = Corpus()
    skip = _Skips(corpus, source, strict)
    if source.is_dir():
        entries = _walk_folder(os.path.abspath(source), skip)
    elif source.suffix.lower() in LISTING_SUFFIXES:
        entries = _read_listing(source, skip)
    else:
        raise CorpusError(f"{source}: not a folder, and not a .csv or .jsonl listing")
    try:
        for entry in entries:
            _add(corpus, entry, kind, skip)
        if not corpus.paths:
            first = f", first: {corpus.skipped[0]['path']}: {corpus.skipped[0]['reason']}" if corpus.skipped else ""
            raise CorpusError(f"{source}: the corpus is empty ({len(corpus.skipped)} skipped{first})")
        _assign_labels(corpus, label_index, skip)
        _make_keys_unique(corpus, source)
    finally:
        skip.summarise()
    return corpus


class _Skips:
    """Where skipped inputs go: a record in the corpus, a warning on stderr (the first MAX_WARNINGS),
    and, for a problem under `strict`, a CorpusError instead."""

    def __init__(self, corpus: Corpus, source: Path, strict: bool):
        self.corpus, self.source, self.strict = corpus, source, strict

    def __call__(self, name: str, reason: str, *, line: int | None = None, problem: bool = False) -> None:
        where = f"line {line}: " if line is not None else ""
        if problem and self.strict:
            raise CorpusError(f"{self.source}: {where}{name}: {reason}")
        self.corpus.skipped.append({"path": name, "reason": where + reason})
        if len(self.corpus.skipped) <= MAX_WARNINGS:
            _warn(f"skipped {name}: {where}{reason}")

    def summarise(self) -> None:
        unshown = len(self.corpus.skipped) - MAX_WARNINGS
        if unshown > 0:
            _warn(f"skipped {unshown} more inputs, not shown; a finished pack lists every skipped input "
                  "with its reason under 'skipped' in manifest.json")


def _warn(message: str) -> None:
    print(f"corgi pack: warning: {message}", file=sys.stderr)


def _walk_folder(top: str, skip):
    """Entries of the files under `top`, depth first in sorted order, as os.walk would give them.

    Hidden folders are not entered, and a symlink to a folder is not followed (so a symlink
    loop cannot hang the walk); each is recorded as skipped.  Symlinks to files are entries.
    """
    stack = [""]
    while stack:
        prefix = stack.pop()
        label = printable(prefix.split("/", 1)[0]) or None
        try:
            with os.scandir(os.path.join(top, prefix)) as listing:
                children = sorted(listing, key=lambda child: child.name)
        except OSError as exc:
            skip(printable(prefix or "."), f"cannot list folder: {exc.strerror}", problem=True)
            continue
        folders = []
        for child in children:
            rel = prefix + child.name
            if child.is_dir(follow_symlinks=False):
                if child.name.startswith("."):
                    skip(printable(rel) + "/", "hidden folder")
                else:
                    folders.append(rel + "/")
            elif child.is_symlink() and os.path.isdir(child.path):  # isdir: False for a loop
                skip(printable(rel), "symlink to a folder (not followed)")
            else:
                yield _Entry(child.path, printable(rel), _without_extension(rel), label, None)
        stack.extend(reversed(folders))


def _read_listing(listing: Path, skip):
    """Entries of a listing's rows; a row whose key breaks the key rule is skipped as a problem.

    A relative `path` is read from the listing's folder, an absolute one from where it points.
    Without a `key`, the key is the path without its extension, leading '/' and its empty and
    '.' components dropped; a '..' left in it breaks the rule (give such a row a `key`).
    """
    for line, row in _listing_rows(listing):
        path, key = row["path"], row.get("key") or None
        stem = key if key is not None else _without_extension("/".join(
            part for part in path.split("/") if part not in ("", ".")))
        problem = key_problem(stem)
        if problem:
            skip(printable(path), f"key '{printable(stem)}' {problem}", line=line, problem=True)
            continue
        label = row.get("label")
        label = printable(str(label)) if label not in (None, "") else None
        yield _Entry(os.path.join(listing.parent, path), printable(path), stem, label, line)


def _listing_rows(listing: Path):
    """(line, row dict) per row of a CSV or JSONL listing; a malformed listing raises CorpusError."""
    is_csv, line = listing.suffix.lower() == ".csv", 0
    try:
        with open(listing, newline="", encoding="utf-8") as f:
            if is_csv:
                reader = csv.DictReader(f)
                rows = [(reader.line_num, row) for row in reader]
            else:
                rows = []
                for line, text in enumerate(f, start=1):
                    if text.strip():
                        rows.append((line, json.loads(text)))
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{listing}: line {line}: not JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise CorpusError(f"{listing}: not UTF-8 text") from None
    except csv.Error as exc:
        raise CorpusError(f"{listing}: not CSV ({exc})") from None
    for line, row in rows:
        if not isinstance(row, dict) or not row.get("path"):
            raise CorpusError(f"{listing}: line {line} has no 'path'")
        for column in ("path", "key"):
            if row.get(column) is not None and not isinstance(row[column], str):
                raise CorpusError(f"{listing}: line {line}: '{column}' is not a string")
        yield line, row


def _add(corpus: Corpus, entry: _Entry, kind: str, skip) -> None:
    """Stat one entry and append it to the corpus columns, or record why it is skipped."""
    filename = os.path.basename(entry.path)
    ext = _extension(filename)
    if filename.startswith("."):
        skip(entry.name, "hidden file", line=entry.line)
        return
    file_kind = kind if kind != "auto" else KIND_OF_EXTENSION.get(ext)
    if file_kind is None:
        skip(entry.name, f"unknown extension '.{printable(ext)}'" if ext else "no extension", line=entry.line)
        return
    try:
        info = os.stat(entry.path)
    except OSError as exc:
        skip(entry.name, f"cannot stat: {exc.strerror}", line=entry.line, problem=True)
        return
    except ValueError as exc:  # a NUL or a lone surrogate in a listing's path
        skip(entry.name, f"not a usable path ({exc})", line=entry.line, problem=True)
        return
    if not stat.S_ISREG(info.st_mode):
        skip(entry.name, not_regular_reason(info.st_mode), line=entry.line, problem=True)
        return
    corpus.paths.append(entry.path)
    corpus.relpaths.append(entry.name)
    corpus.exts.append(_ESCAPED_IN_LAST.sub(_percent_escape, ext) or "bin")
    corpus.kinds.append(KINDS.index(file_kind))
    corpus.label_names.append(entry.label)
    corpus.keys.append(key_from_path(entry.stem))
    corpus.nbytes.append(info.st_size)
    corpus.mtimes.append(info.st_mtime_ns)


def not_regular_reason(mode: int) -> str:
    """Why a file of this `st_mode` is not packed: only regular files are (FIFOs could block a read forever)."""
    what = next((name for test, name in _FILE_TYPES if test(mode)), "an unknown file type")
    return f"not a regular file ({what})"


def key_from_path(stem: str) -> str:
    """The key of a '/'-separated path without its extension; it obeys the key rule if `stem` has no empty,
    '.' or '..' components, and webdataset reads it back whole.

    In every component '%', control characters and bytes that are not UTF-8 are percent-escaped
    (their bytes as %XX); in the last component '.' is too, since webdataset splits a member name
    at the first dot of its base name.  The mapping is injective: distinct paths keep distinct keys.
    """
    folders, slash, last = stem.rpartition("/")
    return _ESCAPED_IN_FOLDER.sub(_percent_escape, folders) + slash + _ESCAPED_IN_LAST.sub(_percent_escape, last)


def _percent_escape(match: re.Match) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8", "surrogateescape"))


def printable(name: str) -> str:
    """`name` for messages and the manifest: control characters and bytes that are not UTF-8 as backslash escapes."""
    return _UNPRINTABLE.sub(_backslash_escape, name)


def _backslash_escape(match: re.Match) -> str:
    char = match.group()
    if "\udc80" <= char <= "\udcff":  # an undecodable byte of a file name
        return f"\\x{ord(char) - 0xdc00:02x}"
    return repr(char)[1:-1]


def _extension(filename: str) -> str:
    """The lower-case extension of a file name; '' when it has none (a hidden file's leading dot is not one)."""
    stem, dot, ext = filename.rpartition(".")
    return ext.lower() if dot and stem else ""


def _without_extension(path: str) -> str:
    ext = _extension(path.rsplit("/", 1)[-1])
    return path[: -len(ext) - 1] if ext else path


def _assign_labels(corpus: Corpus, label_index, skip) -> None:
    names = {n for n in corpus.label_names if n is not None}
    if label_index is not None:
        corpus.labels = list(label_index)
        unknown = [i for i, n in enumerate(corpus.label_names) if n is not None and n not in set(label_index)]
        for i in unknown:
            skip(corpus.relpaths[i], f"label '{corpus.label_names[i]}' not in the label index")
        for i in reversed(unknown):
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


def _make_keys_unique(corpus: Corpus, source: Path) -> None:
    """Files that share a key (photo.JPG beside photo.png) keep their escaped extension, case and all, in the key."""
    seen = {}
    for i, key in enumerate(corpus.keys):
        seen.setdefault(key, []).append(i)
    for key, indices in seen.items():
        if len(indices) > 1:
            for i in indices:
                ext = os.path.basename(corpus.paths[i]).rsplit(".", 1)[-1]
                corpus.keys[i] = key + "%2E" + _ESCAPED_IN_LAST.sub(_percent_escape, ext)
    first_with = {}
    for i, key in enumerate(corpus.keys):
        if key in first_with:
            raise CorpusError(f"{source}: two inputs have the same key '{key}' "
                              f"({corpus.relpaths[first_with[key]]}, {corpus.relpaths[i]})")
        first_with[key] = i

"""The corpus: every file to pack, as compact numpy columns in walk order, built from a streaming walk.

The walk (walk.py) is consumed a chunk of `CHUNK` entries at a time.  Each chunk's values are
spooled to unnamed files (spool.py) and read back as one numpy column each when the walk is done,
so once a chunk has passed no Python object is left per file: the driver keeps 28 bytes per file
(byte count, key length, kind, extension, label, string offset, a flag), whatever the corpus
holds; names and keys stay on disk.  Only ``stat`` is called here; file contents are read later,
by the pack's tasks.

Every input gets an outcome: it is packed, or it is skipped with a one-line warning on
stderr and a record in the manifest.  Some skips follow a rule (hidden files and folders,
unknown extensions, symlinked folders, labels outside the label index); the others are
problems (a missing or unreadable file, something that is not a regular file, a listing
row whose key breaks the key rule), and `strict` turns the first problem into a CorpusError.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from corgi_io.errors import CorpusError
from corgi_io.manifest import KINDS
from corgi_io.packing import keys as key_rules
from corgi_io.packing.spool import SpooledColumn, SpooledStrings, decode
from corgi_io.packing.walk import (escaped_extension, extension, key_from_path, printable, read_listing,
                                   walk_folder)

EXTENSIONS = {
    "image": {"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"},
    "video": {"mp4", "avi", "mkv", "mov", "webm"},
    "text": {"txt", "md", "json", "jsonl"},
}
KIND_OF_EXTENSION = {ext: kind for kind, exts in EXTENSIONS.items() for ext in exts}
KIND_ID = {kind: i for i, kind in enumerate(KINDS)}
LISTING_SUFFIXES = {".csv", ".jsonl"}
MAX_WARNINGS = 20  # skipped inputs warned one line each; the rest are counted in one line
CHUNK = 8192       # entries turned into columns at a time
MAX_EXTENSIONS = int(np.iinfo(np.uint16).max) + 1  # the manifest's extension column is uint16
_FILE_TYPES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))
_NUMERIC = {"nbytes": np.int64, "key_bytes": np.uint32, "kind": np.uint8, "ext": np.uint16, "label": np.int32,
            "key_hash": np.int64}


@dataclass
class Corpus:
    """The files to pack in walk order: numpy columns, with each file's raw name and key in `strings`."""

    base: str                  # folder that raw names are relative to (an absolute raw name stands alone)
    strings: SpooledStrings    # per file: raw name (as the folder or listing has it), NUL, key
    nbytes: np.ndarray         # int64: payload bytes, from stat
    key_bytes: np.ndarray      # uint32: UTF-8 bytes of the key
    kind: np.ndarray           # uint8: index into KINDS
    ext: np.ndarray            # uint16: index into `extensions`, the tar member suffix
    label: np.ndarray          # int32: index into `labels`, -1 when unlabeled
    suffixed: np.ndarray       # bool: the key keeps the file's extension (two files share a stem)
    extensions: list           # lower-case, escaped extensions, sorted
    labels: list               # the label index: id -> name
    skipped: list              # {"path", "reason"}
    fingerprint: str           # digest of names, sizes and mtimes: a resumed pack must see the same corpus

    def __len__(self):
        return len(self.nbytes)

    def names_and_keys(self, indices) -> tuple:
        """(raw names, keys) of the files at `indices`, in that order."""
        names, keys = [], []
        for index, record in zip(np.asarray(indices).tolist(), self.strings.take(indices)):
            raw, _, key = decode(record).partition("\0")
            names.append(raw)
            keys.append(key + key_rules.suffix(raw) if self.suffixed[index] else key)
        return names, keys

    def files(self):
        """(path to read, printable name, key) of every file in walk order."""
        for start in range(0, len(self), CHUNK):
            names, keys = self.names_and_keys(np.arange(start, min(start + CHUNK, len(self))))
            yield from ((os.path.join(self.base, name), printable(name), key) for name, key in zip(names, keys))

    def close(self) -> None:
        """Delete the spooled names (they are gone anyway when the process ends)."""
        self.strings.close()


def discover(source, kind: str = "auto", label_index=None, strict: bool = False, *, spool_dir=None,
             progress=None, max_sample_bytes: int | None = None) -> Corpus:
    """Walk SOURCE (folder or listing file) into a Corpus, a chunk at a time.

    `kind` other than "auto" keeps only files of that kind: a file whose extension names another kind
    is skipped (recorded, and counted in one warning line), and one whose extension names no kind is
    taken as that kind (probed as one later: a file the probe rejects is skipped then).
    A file larger than `max_sample_bytes` is skipped as a problem, before anything reads it.
    `label_index`, a list of class names, fixes the label ids; files of other classes are skipped.
    Skipped inputs are warned on stderr and recorded in `Corpus.skipped`; with `strict`, an input
    that should have been packed but cannot be (see the module docstring) raises CorpusError.
    Names are spooled to an unnamed file in `spool_dir`; `progress(files)` is told of each chunk.
    """
    source = Path(source)
    is_folder = check_source(source)
    builder = _Builder(source, kind, label_index, strict, spool_dir, max_sample_bytes)
    if is_folder:
        base, entries = os.path.abspath(source), walk_folder(os.path.abspath(source), builder.skip)
    else:
        base, entries = os.path.abspath(source.parent), read_listing(source, builder.skip)
    try:
        for entry in entries:
            builder.add(entry)
            if len(builder.pending) >= CHUNK:
                _report(progress, builder.flush())
        _report(progress, builder.flush())
        return builder.finish(base)
    except BaseException:
        builder.strings.close()
        raise
    finally:
        builder.summarise()


def check_source(source: Path) -> bool:
    """True for a folder, False for a listing file; CorpusError for anything else (before any work)."""
    if not source.exists():
        raise CorpusError(f"{source}: no such file or directory")
    if not source.is_dir() and source.suffix.lower() not in LISTING_SUFFIXES:
        raise CorpusError(f"{source}: not a folder, and not a .csv or .jsonl listing")
    return source.is_dir()


def _report(progress, files: int) -> None:
    if progress is not None:
        progress(files)


def not_regular_reason(mode: int) -> str:
    """Why a file of this `st_mode` is not packed: only regular files are (FIFOs could block a read forever)."""
    what = next((name for test, name in _FILE_TYPES if test(mode)), "an unknown file type")
    return f"not a regular file ({what})"


def too_large_reason(nbytes: int, most: int) -> str:
    """Why a file of `nbytes` bytes is not packed when samples may have at most `most`."""
    return f"{nbytes:,} bytes, above the limit of {most:,} (--max-sample-bytes)"


class _Builder:
    """Entries in, columns out: per-file values wait in `pending` until `flush` turns them into arrays."""

    def __init__(self, source: Path, kind: str, label_index, strict: bool, spool_dir, max_sample_bytes):
        self.source, self.kind, self.strict, self.max_sample_bytes = source, kind, strict, max_sample_bytes
        self.strings = SpooledStrings(spool_dir)
        self.columns = {name: SpooledColumn(dtype, spool_dir) for name, dtype in _NUMERIC.items()}
        self.fixed_labels = label_index is not None
        self.label_ids = {name: i for i, name in enumerate(label_index or ())}  # name -> id (provisional if not fixed)
        self.ext_ids, self.skipped, self.label_skips = {}, [], 0  # ext_ids: escaped extension -> provisional id
        self.warned, self.kind_skips = 0, 0  # skips warned one line each; files of other kinds than `kind`
        self.ext_of_raw = {}  # lower-case extension -> provisional id (escaped once per extension)
        self.pending, self.records, self.lines = [], [], []
        self.digest = hashlib.sha256()

    def skip(self, name: str, reason: str, *, line: int | None = None, problem: bool = False,
             quiet: bool = False) -> None:
        """Record a skipped input and warn (the first MAX_WARNINGS, unless `quiet`: counted in `summarise`);
        under `strict` a problem raises instead."""
        where = f"line {line}: " if line is not None else ""
        if problem and self.strict:
            raise CorpusError(f"{self.source}: {where}{name}: {reason}")
        self.skipped.append({"path": name, "reason": where + reason})
        if not quiet and self.warned < MAX_WARNINGS:
            self.warned += 1
            warn(f"skipped {name}: {where}{reason}")

    def summarise(self) -> None:
        if self.kind_skips:
            warn(f"skipped {self.kind_skips} files of other kinds than {self.kind} (--kind {self.kind})")
        unshown = len(self.skipped) - self.kind_skips - self.warned
        if unshown > 0:
            warn(f"skipped {unshown} more inputs, not shown; a finished pack lists every skipped input "
                 "with its reason under 'skipped' in manifest.json")

    def add(self, entry) -> None:
        """Stat one entry and queue its values, or record why it is skipped."""
        filename = entry.path.rsplit("/", 1)[-1]
        ext = extension(filename)
        name = printable(entry.raw)
        if filename.startswith("."):
            return self.skip(name, "hidden file", line=entry.line)
        file_kind = KIND_OF_EXTENSION.get(ext)
        if self.kind != "auto" and file_kind not in (None, self.kind):
            self.kind_skips += 1
            return self.skip(name, f"a {file_kind} file: --kind {self.kind} keeps only {self.kind} files",
                             line=entry.line, quiet=True)
        file_kind = file_kind if self.kind == "auto" else self.kind
        if file_kind is None:
            return self.skip(name, f"unknown extension '.{printable(ext)}'" if ext else "no extension", line=entry.line)
        try:
            info = os.stat(entry.path)
        except OSError as exc:
            return self.skip(name, f"cannot stat: {exc.strerror}", line=entry.line, problem=True)
        except ValueError as exc:  # a NUL or a lone surrogate in a listing's path
            return self.skip(name, f"not a usable path ({exc})", line=entry.line, problem=True)
        if not stat.S_ISREG(info.st_mode):
            return self.skip(name, not_regular_reason(info.st_mode), line=entry.line, problem=True)
        if self.max_sample_bytes is not None and info.st_size > self.max_sample_bytes:
            return self.skip(name, too_large_reason(info.st_size, self.max_sample_bytes), line=entry.line, problem=True)
        label = self._label_id(entry.label, name, entry.line)
        if label is None:
            return None
        key = key_from_path(entry.stem)
        ext_id = self.ext_of_raw.get(ext)
        if ext_id is None:
            ext_id = self.ext_of_raw[ext] = self.ext_ids.setdefault(escaped_extension(ext) or "bin", len(self.ext_ids))
        self.records.append(f"{entry.raw}\0{key}")
        self.lines.append(f"{name}\0{info.st_size}\0{info.st_mtime_ns}\n")
        key_bytes = len(key) if key.isascii() else len(key.encode("utf-8"))
        self.pending.append((info.st_size, key_bytes, KIND_ID[file_kind], ext_id, label, hash(key)))
        return None

    def _label_id(self, label, name: str, line):
        """The (provisional) id of `label`, -1 without one; None when it is outside a fixed label index (skipped)."""
        if label is None:
            return -1
        if not self.fixed_labels:
            return self.label_ids.setdefault(label, len(self.label_ids))
        found = self.label_ids.get(label)
        if found is None:
            self.label_skips += 1
            self.skip(name, f"label '{label}' not in the label index", line=line)
        return found

    def flush(self) -> int:
        """Turn the queued values into one chunk of each column; returns how many files it held."""
        count = len(self.pending)
        if count:
            for name, values in zip(_NUMERIC, zip(*self.pending)):
                self.columns[name].extend(values)
            self.strings.extend(self.records)
            self.digest.update("".join(self.lines).encode("utf-8"))
            self.pending, self.records, self.lines = [], [], []
        if len(self.ext_ids) > MAX_EXTENSIONS:
            raise CorpusError(f"{self.source}: more than {MAX_EXTENSIONS} distinct extensions")
        return count

    def finish(self, base: str) -> Corpus:
        """The Corpus: labels and extensions numbered in their final order, keys made unique."""
        self.strings.seal()
        if not len(self.strings):
            if self.label_skips:
                raise CorpusError("every file has a label outside the given label index")
            first = f", first: {self.skipped[0]['path']}: {self.skipped[0]['reason']}" if self.skipped else ""
            raise CorpusError(f"{self.source}: the corpus is empty ({len(self.skipped)} skipped{first})")
        column = {name: self.columns[name].read() for name in ("key_hash", "nbytes", "key_bytes", "kind")}
        extensions, column["ext"] = _renumbered(self.ext_ids, self.columns["ext"].read(), sorted(self.ext_ids))
        labels, column["label"] = self._labels(self.columns["label"].read())
        corpus = Corpus(base, self.strings, column["nbytes"], column["key_bytes"], column["kind"], column["ext"],
                        column["label"], np.zeros(len(self.strings), dtype=bool), extensions, labels, self.skipped,
                        self.digest.hexdigest())
        key_rules.make_unique(corpus, column.pop("key_hash"), self.source)
        return corpus

    def _labels(self, provisional: np.ndarray) -> tuple:
        """(label index, final ids): a given index as is; integer class names keep their own ids; else sorted."""
        names = list(self.label_ids)
        if self.fixed_labels:
            return names, provisional
        if names and all(name.isdigit() for name in names):
            labels = [str(i) for i in range(max(int(name) for name in names) + 1)]
            return labels, _relabelled(provisional, [int(name) for name in names])
        return _renumbered(self.label_ids, provisional, sorted(names))


def _renumbered(ids: dict, column: np.ndarray, final: list) -> tuple:
    """(final names, column with provisional ids -> ids into `final`)."""
    position = {name: i for i, name in enumerate(final)}
    return final, _relabelled(column, [position[name] for name in ids])


def _relabelled(column: np.ndarray, new_ids: list) -> np.ndarray:
    """`column` with each provisional id i replaced by new_ids[i]; -1 (unlabeled) stays -1."""
    lookup = np.array([*new_ids, -1]).astype(column.dtype)  # index -1 picks the appended -1
    return lookup[column]


def warn(message: str) -> None:
    """A one-line warning on stderr that does not break a progress bar."""
    tqdm.write(f"corgi pack: warning: {message}", file=sys.stderr)

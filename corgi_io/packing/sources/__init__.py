"""Existing shards and tables as a SOURCE: WebDataset tars, TFRecord files, Parquet tables, JSONL rows.

A SOURCE of one of these forms is read in **units**: a tar file, a TFRecord file, a Parquet row
group, a JSONL file.  Planning stays pure and cheap: `units(source)` lists them as small picklable `Unit`
records (a Parquet file's row groups come from its footer), so a process pool or Dask can later
run one task per unit; `read_unit(unit, ...)` turns one unit into an iterator of
`corgi_io.packing.sample.PackSample`, holding one sample (or one Parquet batch) at a time.

`detect` says which form a SOURCE is from the names it holds; `from_` forces one.  The folder and
listing forms are read by `corgi_io.packing.walk` as before; this package lists and reads the
others, one module each, chosen from the `SOURCE_MODULES` registry.  Each module offers
``SUFFIXES`` (the file names it reads), ``units(path)`` and ``read(unit, *, strict, on_skip, ...)``.

`corgi pack` packs each unit in a task of its own (`packing.unit_writer`, ``--from``), with the
resume of the folder packs.  Bad inputs follow the corpus rules: one input that cannot be read (a
member, a record, a row group) is skipped with a one-line warning naming the file and the member,
byte offset or row group, or raises BadInput under `strict`.
"""
from __future__ import annotations

import importlib
import os
import posixpath
from typing import NamedTuple

from corgi_io.arguments import choose
from corgi_io.errors import ArgumentError, BadInput, CorpusError
from corgi_io.manifest.names import key_problem
from corgi_io.manifest.fields import check_field_name
from corgi_io.packing.sample import PackSample

SOURCE_MODULES = {
    "wds": "corgi_io.packing.sources.wds",
    "tfrecord": "corgi_io.packing.sources.tfrecord",
    "parquet": "corgi_io.packing.sources.parquet",
    "jsonl": "corgi_io.packing.sources.jsonl",  # inline values; a .jsonl SOURCE is a listing unless forced
}
FORMS = ("folder", "listing", *SOURCE_MODULES)
MAX_LABEL = 2 ** 31 - 1  # the manifest's labels are int32; -1 is "unlabeled"
LISTING_SUFFIXES = (".csv", ".jsonl")
SIDECAR_SUFFIXES = (".index",)  # files beside shards that are not units (tfrecord's index)
SUFFIXES = {  # file name ending -> form; the longest ending is tried first
    ".tar": "wds", ".tar.gz": "wds", ".tgz": "wds", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord",
    ".parquet": "parquet",
}


class Unit(NamedTuple):
    """One task's worth of input: a whole file, or one row group of a Parquet file (picklable, small)."""

    form: str          # a key of SOURCE_MODULES
    path: str          # a local path or an fsspec URL
    part: int = -1     # the Parquet row group; -1: the whole file
    first_row: int = 0  # the Parquet row group's first row in its file (default keys count from it)
    rows: int = -1     # rows in the row group; -1: not known before reading

    @property
    def name(self) -> str:
        """What a message calls the unit: its file, and its row group if it is one."""
        return self.path if self.part < 0 else f"{self.path} (row group {self.part})"


def form_of_name(name: str) -> str | None:
    """The form whose shard files end like `name` (case-insensitive), or None."""
    lower = name.lower()
    return next((SUFFIXES[end] for end in sorted(SUFFIXES, key=len, reverse=True) if lower.endswith(end)), None)


def detect(source: str, names=None, from_: str | None = None) -> str:
    """The form of SOURCE, from what it holds (pure: no I/O).

    `names` are the entries directly in SOURCE when it is a folder (sub-folders end with '/'),
    None when SOURCE is one file.  A file is a listing (.csv, .jsonl) or a shard of its suffix; a
    folder whose visible files are all shards of one form (sidecars aside) is that form, a
    folder with none is a folder corpus, and a folder mixing shards with anything else (sub-folders
    too) is ambiguous: CorpusError asking for `from_`.  Hidden names are not looked at.  `from_` (one
    of FORMS; ``jsonl`` reads a .jsonl as inline values, not as a listing) is returned as given.
    """
    if from_ is not None:
        return choose("from_", from_, FORMS)
    if names is None:
        if source.lower().endswith(LISTING_SUFFIXES):
            return "listing"
        form = form_of_name(source)
        if form is None:
            raise CorpusError(f"{source}: neither a listing (.csv, .jsonl) nor a shard file "
                              f"({', '.join(sorted(SUFFIXES))}); choose a form with from_ (one of {FORMS})")
        return form
    forms = {None if name.endswith("/") else form_of_name(name) for name in _visible(names)}
    if forms <= {None}:
        return "folder"
    if len(forms) > 1:
        found = sorted(form or "other files" for form in forms)
        raise CorpusError(f"{source}: holds {' and '.join(found)}; choose a form with from_ (one of {FORMS})")
    return forms.pop()


def source_form(source: str, from_: str | None = None) -> str:
    """The form of SOURCE (a local path or fsspec URL): `from_` when given, else `detect`ed from the names directly
    in it (one listing of one folder); CorpusError for a SOURCE that does not exist."""
    if from_ is not None:
        return detect(source, None, from_)
    if _is_glob(source):
        return detect(source, [posixpath.basename(path) for path in _glob(source)])
    if "://" not in source:  # a local path: no fsspec for the folder and listing packs
        if not os.path.exists(source):
            raise CorpusError(f"{source}: no such file or directory")
        if not os.path.isdir(source):
            return detect(source)
        with os.scandir(source) as entries:
            return detect(source, sorted(entry.name + "/" * entry.is_dir() for entry in entries))
    fs, path = _filesystem(source)
    if not fs.exists(path):
        raise CorpusError(f"{source}: no such file or folder")
    return detect(source, sorted(_entry_name(fs, entry) for entry in fs.ls(path, detail=True)) if fs.isdir(path)
                  else None)


def units(source: str, from_: str | None = None) -> list:
    """The units of SOURCE (a local path or fsspec URL) in a stable order: its shard files, sorted, or
    the one file; for Parquet one unit per row group, from each file's footer.

    A folder or listing SOURCE has no units here (packing.walk reads it): CorpusError.
    """
    if _is_glob(source):
        found = _glob(source)
        form = detect(source, [posixpath.basename(path) for path in found], from_)
        if form not in SOURCE_MODULES:
            raise CorpusError(f"{source}: matches no shards or tables (a glob names {', '.join(SOURCE_MODULES)} files)")
        return [unit for path in found if path.lower().endswith(source_module(form).SUFFIXES)
                for unit in source_module(form).units(path)]
    fs, path = _filesystem(source)
    if not fs.exists(path):
        raise CorpusError(f"{source}: no such file or folder")
    folder = fs.isdir(path)
    names = sorted(_entry_name(fs, entry) for entry in fs.ls(path, detail=True)) if folder else None
    form = detect(source, names, from_)
    if form not in SOURCE_MODULES:
        raise CorpusError(f"{source}: is a {form} SOURCE, which packing.walk reads (no units)")
    module = source_module(form)
    if not folder:
        return list(module.units(source))
    files = [name for name in _visible(names) if name.lower().endswith(module.SUFFIXES)]
    if not files:
        raise CorpusError(f"{source}: holds no {form} files ({', '.join(module.SUFFIXES)})")
    return [unit for name in files for unit in module.units(_join(source, name))]


def read_unit(unit: Unit, **options):
    """The PackSamples of one unit: its form's `read` (options as that module takes them)."""
    return source_module(unit.form).read(unit, **options)


def source_module(form: str):
    """The module that lists and reads `form` (one of SOURCE_MODULES); ArgumentError listing them otherwise."""
    return importlib.import_module(choose("form", form, SOURCE_MODULES))


def check_field_mapping(argument: str, mapping, what: str) -> dict:
    """`mapping` if it maps field names, 'label' or 'key' to non-empty `what`s (feature or column names) and
    names at least one field; ArgumentError naming `argument` otherwise."""
    if not isinstance(mapping, dict) or not mapping:
        raise ArgumentError(f"{argument} must map field names to {what}s, got {mapping!r}")
    for name, target in mapping.items():
        if not isinstance(target, str) or not target:
            raise ArgumentError(f"{argument}[{name!r}] must be a {what}, got {target!r}")
        if name not in ("label", "key"):
            try:
                check_field_name(name)
            except BadInput as exc:
                raise ArgumentError(f"{argument}: {exc}") from None
    if set(mapping) <= {"label", "key"}:
        raise ArgumentError(f"{argument} {mapping!r} maps no field (only label and key)")
    return mapping


def check_label(value) -> int:
    """A class id from an int or decimal ASCII digits (bytes or str, blanks around allowed): 0 to MAX_LABEL
    (the manifest's label is int32); BadInput otherwise."""
    if isinstance(value, (bytes, str)):
        digits = value.strip()
        if not digits.isdigit() or not digits.isascii() or len(digits) > 10:
            raise BadInput(f"label {value[:20]!r} is not an integer from 0 to {MAX_LABEL}")
        value = int(digits)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LABEL:
        raise BadInput(f"label {value!r} is not an integer from 0 to {MAX_LABEL}")
    return value


def checked_key(key) -> str:
    """`key` if it is text obeying the key rule of `manifest.names`; BadInput saying how it breaks it otherwise."""
    if not isinstance(key, str):
        raise BadInput(f"key {key!r} is {type(key).__name__}, not text")
    problem = key_problem(key)
    if problem is not None:
        raise BadInput(f"key {key!r} {problem}")
    return key


def sample_from_values(values: dict, default_key: str) -> PackSample:
    """The PackSample of one row's mapped values: 'key' and 'label' taken out (absent or None: `default_key`,
    unlabeled), text fields encoded UTF-8, None fields left out; BadInput naming what is wrong."""
    key, label = values.pop("key", None), values.pop("label", None)
    fields = {name: value.encode("utf-8") if isinstance(value, str) else value
              for name, value in values.items() if value is not None}
    return PackSample(checked_key(default_key if key is None else key), -1 if label is None else check_label(label),
                      fields)


def skip_or_raise(message: str, strict: bool, on_skip) -> None:
    """One bad input: BadInput(message) under `strict`, else `on_skip(message)` (default: a warning line)."""
    if strict:
        raise BadInput(message)
    if on_skip is None:
        from corgi_io.packing.grouping import warn

        on_skip = warn
    on_skip(f"skipped {message}")


def open_binary(path: str):
    """A binary file object for a local path or an fsspec URL (fsspec imported only for URLs)."""
    if "://" not in path:
        return open(path, "rb")
    import fsspec

    return fsspec.open(path, "rb").open()


def _is_glob(source: str) -> bool:
    return any(char in source for char in "*?[")


def _glob(source: str) -> list:
    """The files a glob SOURCE matches, sorted, in SOURCE's own spelling (local paths, or URLs); CorpusError if
    none."""
    if "://" not in source:
        import glob

        found = sorted(path for path in glob.glob(source) if os.path.isfile(path))
    else:
        fs, path = _filesystem(source)
        protocol = source.split("://", 1)[0]
        found = sorted(f"{protocol}://{match.removeprefix(protocol + '://')}" for match in fs.glob(path))
    if not found:
        raise CorpusError(f"{source}: matches no file")
    return found


def _visible(names) -> list:
    """`names` without hidden ones and sidecars: what decides a folder's form and lists its units."""
    return [name for name in names if not name.startswith(".") and not name.endswith(SIDECAR_SUFFIXES)]


def _filesystem(source: str):
    """(fsspec filesystem, path in it) of a local path or URL."""
    from fsspec.core import url_to_fs

    return url_to_fs(source)


def _entry_name(fs, entry: dict) -> str:
    """An `ls` entry's base name, with '/' after a folder's."""
    name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
    return name + "/" if entry["type"] == "directory" else name


def _join(source: str, name: str) -> str:
    """`name` inside the folder SOURCE, in SOURCE's own spelling (a path stays a path, a URL a URL)."""
    return source.rstrip("/") + "/" + name if "://" in source else os.path.join(source, name)

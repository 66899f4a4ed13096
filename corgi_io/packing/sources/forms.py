"""Which form a SOURCE is (folder, listing, WebDataset tars, TFRecord, Parquet, JSONL), from the names it holds.

`detect` decides from names (pure); `source_form` lists the one folder it needs to; the file-system helpers
(globs, fsspec URLs, hidden names and sidecars) serve the listing of units too (`unit_list.py`).
"""
from __future__ import annotations

import os
import posixpath

from corgi_io.arguments import choose
from corgi_io.errors import CorpusError

SOURCE_MODULES = {
    "wds": "corgi_io.packing.sources.wds",
    "tfrecord": "corgi_io.packing.sources.tfrecord",
    "parquet": "corgi_io.packing.sources.parquet",
    "jsonl": "corgi_io.packing.sources.jsonl",  # inline values; a .jsonl SOURCE is a listing unless forced
}
FORMS = ("folder", "listing", *SOURCE_MODULES)
LISTING_SUFFIXES = (".csv", ".jsonl")
SIDECAR_SUFFIXES = (".index",)  # files beside shards that are not units (tfrecord's index)
SUFFIXES = {  # file name ending -> form; the longest ending is tried first
    ".tar": "wds", ".tar.gz": "wds", ".tgz": "wds", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord",
    ".parquet": "parquet",
}


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
    forms = {None if name.endswith("/") else form_of_name(name) for name in visible_names(names)}
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
    if is_glob(source):
        return detect(source, [posixpath.basename(path) for path in glob_files(source)])
    if "://" not in source:  # a local path: no fsspec for the folder and listing packs
        if not os.path.exists(source):
            raise CorpusError(f"{source}: no such file or directory")
        if not os.path.isdir(source):
            return detect(source)
        with os.scandir(source) as entries:
            return detect(source, sorted(entry.name + "/" * entry.is_dir() for entry in entries))
    fs, path = filesystem(source)
    if not fs.exists(path):
        raise CorpusError(f"{source}: no such file or folder")
    return detect(source, sorted(entry_name(fs, entry) for entry in fs.ls(path, detail=True)) if fs.isdir(path)
                  else None)


def is_glob(source: str) -> bool:
    return any(char in source for char in "*?[")


def glob_files(source: str) -> list:
    """The files a glob SOURCE matches, sorted, in SOURCE's own spelling (local paths, or URLs); CorpusError if
    none."""
    if "://" not in source:
        import glob

        found = sorted(path for path in glob.glob(source) if os.path.isfile(path))
    else:
        fs, path = filesystem(source)
        protocol = source.split("://", 1)[0]
        found = sorted(f"{protocol}://{match.removeprefix(protocol + '://')}" for match in fs.glob(path))
    if not found:
        raise CorpusError(f"{source}: matches no file")
    return found


def visible_names(names) -> list:
    """`names` without hidden ones and sidecars: what decides a folder's form and lists its units."""
    return [name for name in names if not name.startswith(".") and not name.endswith(SIDECAR_SUFFIXES)]


def filesystem(source: str):
    """(fsspec filesystem, path in it) of a local path or URL."""
    from fsspec.core import url_to_fs

    return url_to_fs(source)


def entry_name(fs, entry: dict) -> str:
    """An `ls` entry's base name, with '/' after a folder's."""
    name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
    return name + "/" if entry["type"] == "directory" else name


def joined(source: str, name: str) -> str:
    """`name` inside the folder SOURCE, in SOURCE's own spelling (a path stays a path, a URL a URL)."""
    return source.rstrip("/") + "/" + name if "://" in source else os.path.join(source, name)

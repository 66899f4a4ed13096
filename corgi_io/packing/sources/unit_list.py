"""A SOURCE of shards or tables as its units: what one task reads, listed cheaply and read one at a time.

A SOURCE of one of the forms of `SOURCE_MODULES` is read in **units**: a tar file, a TFRecord file, a
Parquet row group, a JSONL file.  `list_units(source)` lists them as small picklable `Unit` records (a
Parquet file's row groups come from its footer), so a process pool or Dask can run one task per unit;
`read_unit(unit, ...)` turns one unit into an iterator of `PackSample`s, holding one sample (or one
Parquet batch) at a time.  Each form's module offers ``SUFFIXES`` (the file names it reads),
``units(path)`` and ``read(unit, *, strict, on_skip, ...)``.
"""
from __future__ import annotations

import importlib
import posixpath
from typing import NamedTuple

from corgi_io.arguments import choose
from corgi_io.errors import CorpusError
from corgi_io.packing.sources.forms import (SOURCE_MODULES, detect, entry_name, filesystem, glob_files, is_glob,
                                            joined, visible_names)


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


def list_units(source: str, from_: str | None = None) -> list:
    """The units of SOURCE (a local path or fsspec URL) in a stable order: its shard files, sorted, or
    the one file; for Parquet one unit per row group, from each file's footer.

    A folder or listing SOURCE has no units here (packing.walk reads it): CorpusError.
    """
    if is_glob(source):
        found = glob_files(source)
        form = detect(source, [posixpath.basename(path) for path in found], from_)
        if form not in SOURCE_MODULES:
            raise CorpusError(f"{source}: matches no shards or tables (a glob names {', '.join(SOURCE_MODULES)} files)")
        return [unit for path in found if path.lower().endswith(source_module(form).SUFFIXES)
                for unit in source_module(form).units(path)]
    fs, path = filesystem(source)
    if not fs.exists(path):
        raise CorpusError(f"{source}: no such file or folder")
    folder = fs.isdir(path)
    names = sorted(entry_name(fs, entry) for entry in fs.ls(path, detail=True)) if folder else None
    form = detect(source, names, from_)
    if form not in SOURCE_MODULES:
        raise CorpusError(f"{source}: is a {form} SOURCE, which packing.walk reads (no units)")
    module = source_module(form)
    if not folder:
        return list(module.units(source))
    files = [name for name in visible_names(names) if name.lower().endswith(module.SUFFIXES)]
    if not files:
        raise CorpusError(f"{source}: holds no {form} files ({', '.join(module.SUFFIXES)})")
    return [unit for name in files for unit in module.units(joined(source, name))]


def units_base(source: str) -> str:
    """The folder that SOURCE's units are named relative to in skip records, as the folder walk names its files:
    SOURCE itself when it is a folder, the folder holding it when it is one file, a glob's folder before its first
    wildcard (in SOURCE's own spelling)."""
    if is_glob(source):
        return source[:min(source.index(char) for char in "*?[" if char in source)].rpartition("/")[0]
    fs, path = filesystem(source)
    return source if fs.isdir(path) else source.rstrip("/").rpartition("/")[0]


def relative_name(path: str, base: str) -> str:
    """`path` relative to the folder `base` (`units_base`); as it is when it is not under it."""
    return path.removeprefix(base.rstrip("/") + "/") if base else path


def read_unit(unit: Unit, **options):
    """The PackSamples of one unit: its form's `read` (options as that module takes them)."""
    return source_module(unit.form).read(unit, **options)


def source_module(form: str):
    """The module that lists and reads `form` (one of SOURCE_MODULES); ArgumentError listing them otherwise."""
    return importlib.import_module(choose("form", form, SOURCE_MODULES))



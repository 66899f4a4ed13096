"""The corpus: every sample to pack, as compact numpy columns in walk order, built from a streaming walk.

A sample is one or more files: in a folder, the files that share a folder and a stem are one
sample (the WebDataset convention: ``cat/001.jpg`` and ``cat/001.txt`` are sample ``cat/001``
with fields ``jpg`` and ``txt``); the walk gives them one after the other, so a sample is grouped
as its entries come, and nothing waits but that one sample's entries.  A listing row is a sample
of one file.  One field is the sample's primary field (`PackSample.primary`'s rule, or
``--primary``, or the first field of ``--kind``): its kind and extension are the sample's.

The walk (walk.py) is consumed a chunk of `CHUNK` samples at a time.  Each chunk's values are
spooled to unnamed files (spool.py) and read back as one numpy column each when the walk is done,
so once a chunk has passed no Python object is left per sample: the driver keeps 35 bytes per
sample (byte count, key length, kind, extension, label, field mask, string offset), whatever the
corpus holds, 22 once the byte counts and field masks are narrowed (files under 64 KiB, at most 8
field names); names and keys stay on disk.  Only ``stat`` is called here; file contents are read
later, by the pack's tasks.

Grouping and skipping are `grouping.SampleGrouper`'s.  Every input gets an outcome: it is packed, or it is skipped with a one-line warning on
stderr and a record in the manifest.  Some skips follow a rule (hidden files and folders,
unknown extensions, symlinked folders, labels outside the label index); the others are
problems (a missing or unreadable file, something that is not a regular file, a listing
row whose key breaks the key rule), and `strict` turns the first problem into a CorpusError.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corgi_io.errors import CorpusError
from corgi_io.manifest.fields import FIELD_KINDS
from corgi_io.packing.spool import SpooledStrings, decode
from corgi_io.packing import keys as key_rules
from corgi_io.packing.grouping import SampleGrouper
from corgi_io.packing.walk import printable, read_listing, walk_folder

EXTENSIONS = {kind: set(names) for kind, names in FIELD_KINDS.items()}  # the media extensions, by kind
LISTING_SUFFIXES = {".csv", ".jsonl"}
CHUNK = 8192       # entries turned into columns at a time
M_MMAP_THRESHOLD = -3          # <malloc.h>: the size from which glibc's malloc maps a block of its own
MAPPED_FROM = 128 << 10        # glibc's initial threshold, kept fixed (see `_map_large_blocks`)


@dataclass
class Corpus:
    """The samples to pack in walk order: numpy columns, with each sample's raw file names and key in `strings`."""

    base: str                  # folder that raw names are relative to (an absolute raw name stands alone)
    strings: SpooledStrings    # per sample: raw names (as the folder or listing has them, primary first), NUL, key
    nbytes: np.ndarray         # unsigned, the narrowest that holds the largest: bytes of all its files, from stat
    key_bytes: np.ndarray      # uint32: UTF-8 bytes of the key
    kind: np.ndarray           # uint8: index into KINDS, the primary field's
    ext: np.ndarray            # uint16: index into `extensions`, the primary field's tar member suffix
    label: np.ndarray          # int32: index into `labels`, -1 when unlabeled
    fields: np.ndarray         # unsigned, the narrowest that holds them: bit i set when it has `field_names[i]`
    extensions: list           # lower-case, escaped extensions of primary fields, sorted
    labels: list               # the label index: id -> name
    field_names: list          # every field name in the corpus, in order of first appearance (the mask's bits)
    max_fields: int            # the most fields one sample has
    skipped: list              # {"path", "reason"}
    fingerprint: str           # digest of names, sizes and mtimes: a resumed pack must see the same corpus

    def __len__(self):
        return len(self.nbytes)

    def names_and_keys(self, indices) -> tuple:
        """(raw names, keys) of the samples at `indices`, in that order; a sample's raw names are joined by NUL,
        primary first (no packed file's name holds a NUL: the walk and `os.stat` refuse one)."""
        names, keys = [], []
        for record in self.strings.take(indices):
            raw, _, key = decode(record).rpartition("\0")
            names.append(raw)
            keys.append(key)
        return names, keys

    def files(self):
        """(path to read, printable name, key) of every file in walk order (a sample's primary file first)."""
        for start in range(0, len(self), CHUNK):
            names, keys = self.names_and_keys(np.arange(start, min(start + CHUNK, len(self))))
            yield from ((os.path.join(self.base, name), printable(name), key)
                        for names_of, key in zip(names, keys) for name in names_of.split("\0"))

    def close(self) -> None:
        """Delete the spooled names (they are gone anyway when the process ends)."""
        self.strings.close()


def discover(source, kind: str = "auto", label_index=None, strict: bool = False, *, spool_dir=None,
             progress=None, max_sample_bytes: int | None = None, primary: str | None = None,
             require=()) -> Corpus:
    """Walk SOURCE (folder or listing file) into a Corpus of samples, a chunk at a time.

    `kind` other than "auto" keeps only samples with a field of that kind (the first is primary): the
    files of the others are skipped (recorded, and counted in one warning line), and a sample none of
    whose fields names a kind takes its first field as that kind (probed as one later: a file the
    probe rejects is skipped then).  `primary` names the primary field (a sample without it is
    skipped); `require` lists fields a sample must have (one without is skipped).
    A file larger than `max_sample_bytes` is skipped as a problem, before anything reads it.
    `label_index`, a list of class names, fixes the label ids; files of other classes are skipped.
    Skipped inputs are warned on stderr and recorded in `Corpus.skipped`; with `strict`, an input
    that should have been packed but cannot be (see the module docstring) raises CorpusError.
    Names are spooled to an unnamed file in `spool_dir`; `progress(files)` is told of each chunk.
    """
    source = Path(source)
    is_folder = check_source(source)
    _map_large_blocks()
    builder = SampleGrouper(source, kind, label_index, strict, spool_dir, max_sample_bytes, primary, tuple(require),
                       grouping=is_folder)
    if is_folder:
        base, entries = os.path.abspath(source), walk_folder(os.path.abspath(source), builder.skip)
    else:
        base, entries = os.path.abspath(source.parent), read_listing(source, builder.skip)
    try:
        for entry in entries:
            builder.add(entry)
            if len(builder.pending) >= CHUNK:
                _report(progress, builder.flush())
        builder.close_group()
        _report(progress, builder.flush())
        fields, key_hash = builder.finish(base)
        corpus = _narrowed(Corpus(*fields))
        key_rules.check_unique(corpus, key_hash, source)
        return corpus
    except BaseException:
        builder.strings.close()
        raise
    finally:
        builder.summarise()


def _narrowed(corpus: Corpus) -> Corpus:
    """`corpus` with its byte counts and field masks in the narrowest unsigned dtype that holds their largest value
    (uint16 and uint8 for files under 64 KiB and at most 8 field names: 35 -> 22 B per sample), one column at a
    time: 4 to 7 B per file less at the driver's peak, while the plan is made (issue 30).  O(N), before the key
    check and the plan.  Readers widen a chunk before any arithmetic on it (`pack_plan.make_plan`)."""
    for name in ("nbytes", "fields"):
        column = getattr(corpus, name)
        setattr(corpus, name, column.astype(np.min_scalar_type(int(column.max(initial=0))), copy=False))
    return corpus


def _map_large_blocks() -> None:
    """Have glibc's malloc map every block of MAPPED_FROM bytes or more on its own for the rest of this process, so
    that a freed column goes back to the system at once (a no-op without glibc's mallopt).

    By default glibc raises the threshold to the size of each mapped block freed (up to 32 MiB): once the walk
    frees its first spooled column, the next columns and the plan's and manifest's temporaries up to that size
    come from the heap, and once freed they stay resident, pinned by small live objects around them.  In the pack
    driver that slack added 10 B per file by the time the shards are written and 14 B to its peak (issue 30, 5x10^4
    to 2.5x10^5 files).  Called by the walk, after a local pool has forked its workers, whose file reads keep
    glibc's default.
    """
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MAPPED_FROM)


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



"""What a SOURCE lists, one entry at a time: a folder walk or a listing's rows, plus the name rules.

SOURCE is a folder tree (ImageFolder convention: the first folder under the root is the
class) or a listing file (CSV or JSONL with ``path`` and optional ``label`` and ``key``).
Both are generators, so a corpus of 10^9 files streams through the walk: the folder walk
holds one folder's listing at a time, the listing reader one row.  The folder walk is
sorted, so the same tree always gives the same entries.

The key rule (docs/format.md): a key is a relative POSIX path with no empty, '.' or '..'
components, no control characters, and valid UTF-8.  A listing's keys must obey it as
written; a folder's file names are escaped into keys that obey it (see `key_from_path`).
"""
from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from corgi_io.errors import CorpusError
from corgi_io.manifest.names import CONTROL_CHARACTERS as _CONTROL, key_problem

_UNDECODABLE = "\udc80-\udcff"  # the bytes of a file name that are not UTF-8, as os.fsdecode gives them
_ESCAPED_IN_FOLDER = re.compile(f"[%{_CONTROL}{_UNDECODABLE}]")
_ESCAPED_IN_LAST = re.compile(f"[.%{_CONTROL}{_UNDECODABLE}]")
_UNPRINTABLE = re.compile(f"[{_CONTROL}\ud800-\udfff]")


class Entry(NamedTuple):
    """One input found by a walk or a listing, before its kind and stat are known."""

    path: str             # where its bytes are read from: os.path.join(base, raw)
    raw: str              # the path as the folder or the listing has it, relative to the base (or absolute)
    stem: str             # the key before `key_from_path`: the path without its extension, or a listing's key
    label: str | None
    line: int | None      # the listing line, None in a folder walk


def walk_folder(top: str, skip):
    """Entries of the files under `top`, depth first, each folder's children sorted by (stem, name).

    Sorting by stem first keeps the files of one sample (``001.jpg``, ``001.txt``) adjacent even when
    another name sorts between them (``001.m.z``), so the corpus groups them as they come.

    Hidden folders are not entered, and a symlink to a folder is not followed (so a symlink
    loop cannot hang the walk); each is passed to `skip(name, reason, problem=...)`.
    Symlinks to files are entries.
    """
    stack = [""]
    while stack:
        prefix = stack.pop()
        label = printable(prefix.split("/", 1)[0]) or None
        try:
            with os.scandir(os.path.join(top, prefix)) as listing:
                children = sorted(listing, key=lambda child: (without_extension(child.name), child.name))
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
                yield Entry(child.path, rel, without_extension(rel), label, None)
        stack.extend(reversed(folders))


def read_listing(listing: Path, skip):
    """Entries of a listing's rows; a row whose key breaks the key rule is skipped as a problem.

    A relative `path` is read from the listing's folder, an absolute one from where it points.
    Without a `key`, the key is the path without its extension, leading '/' and its empty and
    '.' components dropped; a '..' left in it breaks the rule (give such a row a `key`).
    """
    base = os.path.abspath(listing.parent)
    for line, row in _listing_rows(listing):
        path, key = row["path"], row.get("key") or None
        stem = key if key is not None else without_extension("/".join(
            part for part in path.split("/") if part not in ("", ".")))
        problem = key_problem(stem)
        if problem:
            skip(printable(path), f"key '{printable(stem)}' {problem}", line=line, problem=True)
            continue
        label = row.get("label")
        label = printable(str(label)) if label not in (None, "") else None
        yield Entry(os.path.join(base, path), path, stem, label, line)


def _listing_rows(listing: Path):
    """(line, row dict) per row of a CSV or JSONL listing, read as they come; a malformed one raises CorpusError."""
    is_csv, line = listing.suffix.lower() == ".csv", 0
    try:
        with open(listing, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f) if is_csv else enumerate(f, start=1)
            for item in reader:
                if is_csv:
                    line, row = reader.line_num, item
                else:
                    line, text = item
                    if not text.strip():
                        continue
                    row = json.loads(text)
                yield line, _checked_row(listing, line, row)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{listing}: line {line}: not JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise CorpusError(f"{listing}: not UTF-8 text") from None
    except csv.Error as exc:
        raise CorpusError(f"{listing}: not CSV ({exc})") from None


def _checked_row(listing: Path, line: int, row) -> dict:
    if not isinstance(row, dict) or not row.get("path"):
        raise CorpusError(f"{listing}: line {line} has no 'path'")
    for column in ("path", "key"):
        if row.get(column) is not None and not isinstance(row[column], str):
            raise CorpusError(f"{listing}: line {line}: '{column}' is not a string")
    return row


def key_from_path(stem: str) -> str:
    """The key of a '/'-separated path without its extension; it obeys the key rule if `stem` has no empty,
    '.' or '..' components, and webdataset reads it back whole.

    In every component '%', control characters and bytes that are not UTF-8 are percent-escaped
    (their bytes as %XX); in the last component '.' is too, since webdataset splits a member name
    at the first dot of its base name.  The mapping is injective: distinct paths keep distinct keys.
    """
    folders, slash, last = stem.rpartition("/")
    if stem.isascii() and stem.isprintable() and "%" not in stem and "." not in last:
        return stem  # nothing to escape (the common case, without two regular expressions)
    return _ESCAPED_IN_FOLDER.sub(_percent_escape, folders) + slash + _ESCAPED_IN_LAST.sub(_percent_escape, last)


def escaped_extension(ext: str) -> str:
    """An extension as it may stand in a key's last component or a tar member suffix (see `key_from_path`)."""
    return _ESCAPED_IN_LAST.sub(_percent_escape, ext)


def _percent_escape(match: re.Match) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8", "surrogateescape"))


def printable(name: str) -> str:
    """`name` for messages and the manifest: control characters and bytes that are not UTF-8 as backslash escapes."""
    if name.isascii() and name.isprintable():
        return name
    return _UNPRINTABLE.sub(_backslash_escape, name)


def _backslash_escape(match: re.Match) -> str:
    char = match.group()
    if "\udc80" <= char <= "\udcff":  # an undecodable byte of a file name
        return f"\\x{ord(char) - 0xdc00:02x}"
    return repr(char)[1:-1]


def extension(filename: str) -> str:
    """The lower-case extension of a file name; '' when it has none (a hidden file's leading dot is not one)."""
    stem, dot, ext = filename.rpartition(".")
    return ext.lower() if dot and stem else ""


def field_name(raw: str) -> str:
    """The field a file gives its sample (its tar member suffix): its escaped lower-case extension, "bin" without one."""
    return escaped_extension(extension(raw.rsplit("/", 1)[-1])) or "bin"


def without_extension(path: str) -> str:
    ext = extension(path.rsplit("/", 1)[-1])
    return path[: -len(ext) - 1] if ext else path

"""Walk entries in, sample columns out: files grouped into samples by folder and stem, every skip recorded.

`SampleGrouper` takes the walk's entries (or a listing's rows) one at a time, groups the files of one
folder and stem into one sample (one field per file, the primary first), records why an input is
skipped, and spools each chunk of samples to numpy columns, so that no Python object is left per sample."""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np

from corgi_io.errors import BadInput, CorpusError
from corgi_io.manifest.fields import KINDS, check_field_name
from corgi_io.packing.sample_rules import FieldRule, Refused
from corgi_io.packing.skip_reasons import (MAX_WARNINGS, empty_corpus, not_regular_reason, too_large, unusable_extra,
                                          warn)
from corgi_io.packing.spool import SpooledColumn, SpooledStrings
from corgi_io.packing.walk import extension, field_name, key_from_path, printable

KIND_ID = {kind: i for i, kind in enumerate(KINDS)}
MAX_EXTENSIONS = int(np.iinfo(np.uint16).max) + 1  # the manifest's extension column is uint16
MAX_FIELDS = 64  # the manifest's field mask column is uint64
_NUMERIC = {"nbytes": np.int64, "key_bytes": np.uint32, "kind": np.uint8, "ext": np.uint16, "label": np.int32,
            "key_hash": np.int64, "fields": np.uint64}


class SampleGrouper:
    """Entries in, columns out: per-file values wait in `pending` until `flush` turns them into arrays."""

    def __init__(self, source: Path, kind: str, label_index, strict: bool, spool_dir, max_sample_bytes,
                 primary: str | None = None, require: tuple = (), grouping: bool = False):
        self.source, self.kind, self.strict, self.max_sample_bytes = source, kind, strict, max_sample_bytes
        self.rule, self.grouping = FieldRule(kind, primary, require), grouping  # grouping: files sharing a stem
        self.strings = SpooledStrings(spool_dir)
        self.columns = {name: SpooledColumn(dtype, spool_dir) for name, dtype in _NUMERIC.items()}
        self.fixed_labels = label_index is not None
        self.label_ids = {name: i for i, name in enumerate(label_index or ())}  # name -> id (provisional if not fixed)
        self.ext_ids, self.skipped, self.label_skips = {}, [], 0  # ext_ids: escaped extension -> provisional id
        self.warned, self.kind_skips = 0, 0  # skips warned one line each; files of other kinds than `kind`
        self.field_bits, self.max_fields = {}, 0  # field name -> bit of the field mask
        self.pending, self.records, self.lines, self.group = [], [], [], []
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
                 "with its reason in columns/skipped.jsonl (corgi verify and Manifest.skip_records() read it)")

    def add(self, entry) -> None:
        """Queue one entry into the sample it belongs to; a new stem closes the previous sample (`close_group`)."""
        if entry.path.rsplit("/", 1)[-1].startswith("."):
            return self.skip(printable(entry.raw), "hidden file", line=entry.line)
        if self.group and not (self.grouping and entry.stem == self.group[0].stem):
            self.close_group()
        self.group.append(entry)
        return None

    def close_group(self) -> None:
        """Turn the queued entries of one sample into a row of values, or record why its files are skipped: its
        primary field and kind are `FieldRule`'s, decided here from its file names, before any plan."""
        group, self.group = self.group, []
        if not group:
            return None
        members = self._distinct_fields(group)
        chosen = self.rule.choose([field for _, field in members])
        if isinstance(chosen, Refused):
            return self._skip_refused(members, chosen)
        index, kind = chosen
        members = [members[index]] + self._usable_extras(members[:index] + members[index + 1:], group[0].stem)
        stats = [self._stat(entry) for entry, _ in members]
        kept = [(entry, field, info) for (entry, field), info in zip(members, stats) if info is not None]
        if stats[0] is None:
            return self._skip_all(kept, f"its primary field '{members[0][1]}' was skipped")
        missing = self.rule.missing([field for _, field, _ in kept])  # a required file skipped above
        if missing is not None:
            return self._skip_all(kept, missing)
        label = self._label_id(group[0].label, [printable(entry.raw) for entry, _, _ in kept], group[0].line)
        if label is not None:
            self._queue(kept, kind, label)
        return None

    def _distinct_fields(self, group: list) -> list:
        """(entry, field name) of each file of a sample; a file repeating a field (a.JPG beside a.jpg) is skipped."""
        members, seen = [], {}
        for entry in group:
            field = field_name(entry.raw)
            if field in seen:
                self.skip(printable(entry.raw), f"field '{field}' repeats in its sample (also {seen[field]})",
                          line=entry.line, problem=True)
            else:
                seen[field] = printable(entry.raw)
                members.append((entry, field))
        return members

    def _skip_refused(self, members: list, refused: Refused) -> None:
        """Skip each file of a sample that `FieldRule` leaves out, with its reason for that file; the files that
        --kind leaves out are counted in one line (`summarise`), not warned one by one."""
        quiet = refused.rule == "kind"
        for entry, field in members:
            ext = printable(extension(entry.path.rsplit("/", 1)[-1]))
            self.kind_skips += quiet
            self.skip(printable(entry.raw), self.rule.file_reason(refused, field, ext), line=entry.line, quiet=quiet)

    def _usable_extras(self, members: list, stem: str) -> list:
        """The non-primary (entry, field) pairs whose field name can name a tar member, a feature and a dict key."""
        usable = []
        for entry, field in members:
            try:
                reason = unusable_extra(check_field_name(field))
            except BadInput as exc:
                reason = f"cannot be a field of sample '{printable(stem)}': {exc}"
            if reason is None:
                usable.append((entry, field))
            else:
                self.skip(printable(entry.raw), reason, line=entry.line)
        return usable

    def _stat(self, entry):
        """The `os.stat` of a file to pack, or None after recording why it cannot be packed."""
        name = printable(entry.raw)
        try:
            info = os.stat(entry.path)
        except OSError as exc:
            return self.skip(name, f"cannot stat: {exc.strerror}", line=entry.line, problem=True)
        except ValueError as exc:  # a NUL or a lone surrogate in a listing's path
            return self.skip(name, f"not a usable path ({exc})", line=entry.line, problem=True)
        if not stat.S_ISREG(info.st_mode):
            return self.skip(name, not_regular_reason(info.st_mode), line=entry.line, problem=True)
        reason = too_large(info.st_size, self.max_sample_bytes)
        return info if reason is None else self.skip(name, reason, line=entry.line, problem=True)

    def _skip_all(self, kept: list, reason: str) -> None:
        for entry, _, _ in kept:
            self.skip(printable(entry.raw), reason, line=entry.line)

    def _queue(self, kept: list, kind: str, label: int) -> None:
        """Queue the values of a sample of files `kept` ((entry, field, stat), primary first)."""
        mask = 0
        for _, field, _ in kept:
            bit = self.field_bits.setdefault(field, len(self.field_bits))
            if bit >= MAX_FIELDS:
                raise CorpusError(f"{self.source}: more than {MAX_FIELDS} distinct field names (the 65th: '{field}')")
            mask |= 1 << bit
        self.max_fields = max(self.max_fields, len(kept))
        key = key_from_path(kept[0][0].stem)
        ext_id = self.ext_ids.setdefault(kept[0][1], len(self.ext_ids))
        self.records.append("\0".join(entry.raw for entry, _, _ in kept) + f"\0{key}")
        self.lines.extend(f"{printable(entry.raw)}\0{info.st_size}\0{info.st_mtime_ns}\n" for entry, _, info in kept)
        key_bytes = len(key) if key.isascii() else len(key.encode("utf-8"))
        self.pending.append((sum(info.st_size for _, _, info in kept), key_bytes, KIND_ID[kind], ext_id, label,
                             hash(key), mask))

    def _label_id(self, label, names: list, line):
        """The (provisional) id of `label`, -1 without one; None when it is outside a fixed label index (the files
        `names` skipped)."""
        if label is None:
            return -1
        if not self.fixed_labels:
            return self.label_ids.setdefault(label, len(self.label_ids))
        found = self.label_ids.get(label)
        if found is None:
            self.label_skips += 1
            for name in names:
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

    def finish(self, base: str) -> tuple:
        """(the `Corpus` fields in their order, the key hashes): labels and extensions numbered in their final order."""
        self.strings.seal()
        if not len(self.strings):
            if self.label_skips:
                raise CorpusError("every file has a label outside the given label index")
            raise empty_corpus(self.source, self.skipped)
        column = {name: self.columns[name].read() for name in ("key_hash", "nbytes", "key_bytes", "kind", "fields")}
        extensions, column["ext"] = _renumbered(self.ext_ids, self.columns["ext"].read(), sorted(self.ext_ids))
        labels, column["label"] = self._labels(self.columns["label"].read())
        return (base, self.strings, column["nbytes"], column["key_bytes"], column["kind"], column["ext"], column["label"],
                column["fields"], extensions, labels, list(self.field_bits), self.max_fields, self.skipped,
                self.digest.hexdigest()), column["key_hash"]

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

"""Field-only reads (`Reading(fields=...)`, issue 33 §2): of each planned piece, only the asked fields' bytes.

A pack of manifest version 6 records every field's payload range and its own CRC32C (`Manifest.field_ranges`).
A reader told ``fields=("txt",)`` keeps the plan of a full read (the same samples in the same order, the same
balance, by the primary field's size) and changes only what a piece's read fetches: not the piece's byte range,
but the asked fields' payloads of its samples.  Ranges at most `GAP` bytes apart are read as one run (a caption
and its json, a tar header apart, are one run; so is a whole block when every field is asked), and all of a
piece's runs go to the storage in one `read_ranges` call: over HTTP one multi-range request per `MAX_RANGES`
runs, elsewhere a few reads in flight.  Each field's payload is checked against its own CRC32C before its
sample exists; a field not asked is neither read nor checked.

What a sample holds: the asked fields it has, each under its name, and `fields` (their names, in record order);
`data` is its primary field when that was asked, else the first name of ``fields=`` (in the order given) that
it holds (b"" when it holds none), and `kind` / `ext` describe `data`.  `index`, `key`, `label` and `size`
(the primary's: what balance and statistics use) are the manifest's, as always.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from corgi_io.errors import ArgumentError, CorruptDataError
from corgi_io.formats import RESERVED_FIELDS
from corgi_io.manifest.checksum import checksum_function
from corgi_io.manifest.field_ranges import FieldRanges, field_ids
from corgi_io.manifest.fields import field_kind

GAP = 4096  # bytes: asked ranges at most this far apart are read as one run (a request saved is worth more)


def wanted_fields(manifest, fields) -> tuple | None:
    """The fields a reader of `manifest` reads on their own (a tuple), or None to read whole pieces: `fields` is
    None, or names every field of the pack.  ArgumentError naming the pack and its fields for a name it does not
    have, and for a pack that records no per-field ranges (before manifest version 6: repack it)."""
    if fields is None:
        return None
    field_ids(manifest, fields)
    if set(fields) >= set(manifest.fields):
        return None
    if not manifest.has_field_ranges:
        raise ArgumentError(f"{manifest.root}: Reading(fields={tuple(fields)!r}) needs each field's byte range, "
                            f"which this version-{manifest.version} pack does not record (version 6 on): repack it "
                            "(corgi pack OLD NEW), or read every field (fields=None)")
    return tuple(fields)


def coalesce(offset: np.ndarray, length: np.ndarray, gap: int = GAP) -> tuple:
    """(starts, lengths, each range's run) of ranges sorted by offset, those at most `gap` bytes apart merged."""
    ends = offset + length
    new = np.ones(len(offset), dtype=bool)
    new[1:] = offset[1:] - ends[:-1] > gap
    first = np.flatnonzero(new)
    run_ends = np.maximum.reduceat(ends, first) if len(first) else ends
    return offset[first], run_ends - offset[first], np.cumsum(new) - 1


class FieldRuns(NamedTuple):
    """A piece's asked fields (`rows`, in shard order) and the runs that read them: each run's start and length,
    and each row's run."""

    rows: FieldRanges
    starts: np.ndarray
    lengths: np.ndarray
    run_of: np.ndarray


def read_runs(storage, path: str, runs: FieldRuns) -> list:
    """The bytes of each run of `runs` in shard `path`: the non-empty ones in one `read_ranges` call, or, from a
    file on this machine (`Storage.local_path`), one `read_range` after the other (no round trip to overlap: a
    thread pool per piece cost 12x the preads of a page-cached shard's captions).  An empty field's run is b"",
    not asked for (a range of no bytes cannot be requested)."""
    lengths = runs.lengths.tolist()
    asked = [(start, n) for start, n in zip(runs.starts.tolist(), lengths) if n]
    if storage.local_path(path) is not None:
        got = iter([storage.read_range(path, start, n) for start, n in asked])
    else:
        got = iter(storage.read_ranges(path, asked))
    return [next(got) if n else b"" for n in lengths]


class FieldSplitter:
    """The asked `fields` of a piece's samples: where they lie (`runs`), their payloads (`cut`), their own
    checksums (`check`) and the sample dicts (`split`); `describe` makes a run of samples' dicts
    (`PieceSplitter.describe`)."""

    def __init__(self, manifest, fields: tuple, describe):
        self.m, self.fields, self.describe = manifest, tuple(fields), describe
        field_ids(manifest, self.fields)
        self.names = np.array(manifest.fields, dtype=object)
        self.checksum = checksum_function(manifest.checksum)

    def runs(self, piece) -> FieldRuns:
        """The asked fields of `piece` (block, start, stop), their rows validated, and the runs that read them."""
        rows = self.m.field_ranges(int(piece[1]), int(piece[2]), self.fields)
        return FieldRuns(rows, *coalesce(rows.offset, rows.length))

    @staticmethod
    def cut(runs: FieldRuns, data: list) -> list:
        """Each field's payload (`bytes`, a copy) out of its run's bytes `data[run]`, in the rows' order."""
        starts = runs.starts.tolist()
        return [data[run][offset - starts[run]:offset - starts[run] + length] for run, offset, length in zip(
            runs.run_of.tolist(), runs.rows.offset.tolist(), runs.rows.length.tolist())]

    def check(self, runs: FieldRuns, payloads: list, storage) -> None:
        """CorruptDataError at the first payload whose checksum is not its field's, naming shard, byte offset, key
        and field."""
        rows = runs.rows
        for i, (payload, crc) in enumerate(zip(payloads, rows.crc.tolist())):
            if self.checksum(payload) != crc:
                sample, offset = int(rows.sample[i]), int(rows.offset[i])
                path, key = self.m.shards.path(int(self.m.samples.shard[sample])), self.m.key(sample)
                raise CorruptDataError(
                    f"{storage.url(path)}: byte offset {offset}: sample {key!r}: field {self.names[rows.field[i]]!r}: "
                    f"{self.m.checksum} mismatch (the field's bytes changed since it was packed)",
                    shard=path, offset=offset, key=key)

    def split(self, piece, runs: FieldRuns, payloads: list) -> tuple:
        """(the sample dicts of `piece`, holding the asked fields (see the module), their payload bytes)."""
        start, stop = int(piece[1]), int(piece[2])
        rows, held = runs.rows, [{} for _ in range(stop - start)]
        named, at = self.names[rows.field], rows.sample - start
        for i, name, payload in zip(at.tolist(), named.tolist(), payloads):
            held[i][name] = payload
        primary = [None] * (stop - start)  # the sample's primary field's name, when asked: its payload is data's
        is_primary = rows.offset == np.asarray(self.m.samples.data_offset[start:stop])[at]
        for i, name in zip(at[is_primary].tolist(), named[is_primary].tolist()):
            primary[i] = name
        chosen = [p if p is not None else next((f for f in self.fields if f in h), self.fields[0])
                  for h, p in zip(held, primary)]
        samples = self.describe(start, stop, (h.get(name, b"") for h, name in zip(held, chosen)))
        for sample, fields, name, p in zip(samples, held, chosen, primary):
            if name != p:  # data is another field than the primary: kind and ext are that field's
                sample["ext"], sample["kind"] = name, field_kind(name)
            sample.update((k, v) for k, v in fields.items() if k not in RESERVED_FIELDS)
            sample["fields"] = list(fields)
        return samples, sum(map(len, payloads))

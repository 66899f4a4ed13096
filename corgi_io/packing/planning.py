"""Every SOURCE listed as units before any task runs: what the driver plans, and the identity OUTPUT is claimed with.

* A folder or listing (`plan_folder`): the walk streams SOURCE into compact columns (corpus.py),
  the pure plan (pack_plan.py) orders the samples and cuts blocks and shards, the samples are
  written in pack order to a table in the partial folder (table.py), and each planned shard is a
  unit (`sources.folder.PlannedShards`).  The driver holds at most a few tens of bytes per file
  while it plans, and nothing per sample once the table is written.
* Existing shards or tables (`plan_streams`): the units are listed (`sources.unit_list`: the tar or
  TFRecord files, sorted, or a Parquet file's row groups from its footer) and packed in their
  order (the loader's CorgiPile shuffle mixes blocks and samples).

Both claim OUTPUT with the pack's identity (its options, SOURCE and a fingerprint of what it
holds: a resumed pack must read the same input) before anything is written in it.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from corgi_io.manifest import MANIFEST_VERSION
from corgi_io.packing.corpus import discover
from corgi_io.packing.pack_plan import PackOptions, make_plan
from corgi_io.packing.sources.folder import PlannedShards
from corgi_io.packing.sources.stream_unit import StreamUnit
from corgi_io.packing.sources.unit_list import list_units, units_base
from corgi_io.packing.table import Table, write_table
from corgi_io.storage.atomic import temp_name


@dataclass(frozen=True)
class Planned:
    """What the driver keeps once SOURCE is planned: its units and a few names, nothing per sample."""

    units: object          # a sequence of FolderShard or StreamUnit, in pack order
    identity: dict         # the pack's recorded options (the manifest's "options")
    options: PackOptions   # as the tasks run them
    partial: Path          # OUTPUT's partial folder
    labels: list | None    # the class names; None: "0" up to the largest class id packed
    known: tuple = ((), ())  # (field names, primary field names) known before any task runs, listed first
    skipped: list = ()       # inputs skipped before any task (the walk's)


def identity(options: PackOptions, source: str, fingerprint: str) -> dict:
    """The pack's identity as OUTPUT records it: the options, SOURCE, and the fingerprint of what it holds."""
    return json.loads(json.dumps(dict(asdict(options), source=source, manifest_version=MANIFEST_VERSION,
                                      corpus=fingerprint, transforms=options.transforms().options())))


def plan_folder(source: Path, output: Path, options: PackOptions, fmt, display, claim, *, strict: bool):
    """Walk SOURCE, claim OUTPUT (`claim(identity)`: the partial folder, or None when OUTPUT already holds this
    pack), plan and write the table; the Planned pack, or None."""
    display.phase("walk", "file")
    corpus = discover(source, options.kind, options.label_index, strict, spool_dir=output, progress=display.advance,
                      max_sample_bytes=options.max_sample_bytes, primary=options.primary, require=options.require)
    try:
        recorded = identity(options, str(source.resolve()), corpus.fingerprint)
        partial = claim(recorded)
        if partial is None:
            return None
        display.phase("plan", "sample", total=len(corpus))
        plan = make_plan(corpus.nbytes, corpus.key_bytes, options, fmt, corpus.fields)
        table = Table(str(partial / temp_name("table.rows")), str(partial / temp_name("table.strings")))
        write_table(table, corpus, plan.order)
        display.advance(len(corpus))
        units = PlannedShards(plan.staged(), table, corpus.base, tuple(corpus.extensions))
        return Planned(units, recorded, options, partial, corpus.labels, _known_names(corpus, options), corpus.skipped)
    finally:
        corpus.close()


def _known_names(corpus, options: PackOptions) -> tuple:
    """(field names, primary field names) that the samples have as the transforms leave them, as far as the
    driver knows: the walk's, renamed by --image-format (``png`` -> ``jpg``), with the ``tokens.npy`` that
    --tokenizer makes primary and without the text --drop-text drops.  A user's --map may make others: the unit
    records name every field written (field_masks.py), and the manifest lists these first, then those."""
    primary, dropped = options.primary_after(), options.dropped_fields()
    fields = [*map(options.renamed, corpus.field_names)] + ([primary] if primary else [])
    extensions = [primary] if primary else [*map(options.renamed, corpus.extensions)]
    return tuple(name for name in dict.fromkeys(fields) if name not in dropped), tuple(dict.fromkeys(extensions))


def plan_streams(source: str, form: str, options: PackOptions, display, claim):
    """List the units of SOURCE (of `form`) and claim OUTPUT (`claim` as for `plan_folder`); the Planned pack, or
    None when OUTPUT already holds it."""
    source, options = _absolute(source), replace(options, order="keep", source_form=form)
    read_options = options.read_options(form)
    display.phase("list", "unit")
    units = list_units(source, form)
    display.advance(len(units))
    recorded = identity(options, source, _fingerprint(units))
    partial = claim(recorded)
    if partial is None:
        return None
    base = units_base(source)
    return Planned([StreamUnit(index, unit, read_options, base) for index, unit in enumerate(units)], recorded, options,
                   partial, None)


def _absolute(source: str) -> str:
    return source if "://" in source else os.path.abspath(source)


def _fingerprint(units: list) -> str:
    """A digest of the units (and, for local files, their sizes and modification times)."""
    digest = hashlib.sha256()
    for unit in units:
        stat = os.stat(unit.path) if "://" not in unit.path else None
        digest.update(json.dumps([*unit, stat and stat.st_size, stat and stat.st_mtime_ns]).encode())
    return digest.hexdigest()

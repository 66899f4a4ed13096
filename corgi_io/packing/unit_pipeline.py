"""Packing existing shards or tables (``corgi pack --from wds|tfrecord|parquet|jsonl``): a task per source unit.

1. The units are listed (`sources.unit_list.list_units`: the tar or TFRecord files, sorted, or a Parquet file's
   row groups from its footer); nothing else is read, so planning is one listing plus the footers.
2. OUTPUT is claimed with the pack's identity (its options, the units and, for local files, their
   sizes and modification times), and the units an earlier run finished (`load_unit_done`) are
   taken out.
3. An executor (pool or Dask) runs `unit_writer.write_unit` on each unit left: unit u is read as
   a stream and written as shards ``shard-<u>-<n>``, in its own order (a pack of sources keeps the
   source's order: the loader's CorgiPile shuffle mixes blocks and samples).
4. The manifest is built from the unit records, a column at a time (unit_manifest.py).

The driver holds one small record per unit and, while the manifest is written, one column; a
pack killed at any moment and run again gives the same bytes as one that was never stopped.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from dataclasses import asdict, replace

from corgi_io.manifest import MANIFEST_VERSION, SAMPLE_COLUMNS, save_manifest
from corgi_io.manifest.checksum import DEFAULT_CHECKSUM
from corgi_io.packing.dedup_pass import HashTask, find_duplicates, hash_file, run_hashes
from corgi_io.packing.skip_reasons import empty_corpus, warn
from corgi_io.packing.output import claim_output, finish_output, open_output, open_partial
from corgi_io.packing.sources.unit_list import list_units
from corgi_io.packing.unit_manifest import UnitManifest
from corgi_io.packing.unit_records import load_unit_done, unit_record_path
from corgi_io.packing.unit_writer import UnitTask, write_unit


def pack_units(source: str, form: str, output, options, executor, display, *, strict: bool, overwrite: bool,
               created) -> None:
    """Pack the units of SOURCE (of `form`) into the locked OUTPUT; `created()` gives the manifest's time stamp."""
    source, options = _absolute(source), replace(options, order="keep", source_form=form)
    read_options = options.read_options(form)
    open_output(output, overwrite)
    display.phase("list", "unit")
    units = list_units(source, form)
    display.advance(len(units))
    identity = json.loads(json.dumps(dict(asdict(options), source=_absolute(source), manifest_version=MANIFEST_VERSION,
                                          corpus=_fingerprint(units), transforms=options.transforms().options())))
    if claim_output(output, identity, overwrite):
        return
    partial = open_partial(output, identity)
    records = [unit_record_path(partial, index) for index in range(len(units))]
    done = {index: found for index, path in enumerate(records)
            if (found := load_unit_done(path, output)) is not None}
    duplicates, bounds = _duplicates(executor, units, partial, read_options, options, display)
    tasks = (UnitTask(index, unit, str(output), str(records[index]), read_options, options, strict, duplicates,
                      bounds[index]) for index, unit in enumerate(units) if index not in done)
    display.phase("write", "sample")
    for result in executor.run(write_unit, tasks, display.advance):
        done[result.index] = result
        display.skipped(result.skipped)
    _write_manifest(output, identity, [done[index] for index in range(len(units))], records, created, display)
    finish_output(output)


def _duplicates(executor, units: list, partial, read_options: dict, options, display) -> tuple:
    """(path of the duplicates mask, each unit's (first, stop) samples in it), from a hashing pass over every unit
    (dedup_pass.py); (None, empty bounds) without --dedup."""
    if not options.dedup:
        return None, [(0, 0)] * len(units)
    tasks = [HashTask(str(hash_file(partial, index)), unit=unit, read_options=read_options, options=options)
             for index, unit in enumerate(units)]
    run_hashes(executor, tasks, display)
    path, counts, _ = find_duplicates([task.out for task in tasks], partial)
    starts = [0, *itertools.accumulate(counts)]
    return path, list(zip(starts, starts[1:]))


def _write_manifest(output, identity: dict, done: list, records: list, created, display) -> None:
    """The manifest of the finished units, one column at a time."""
    if not any(unit.samples for unit in done):
        raise empty_corpus(identity["source"], [entry for unit in done for entry in unit.skipped])
    display.phase("manifest", "column", total=len(SAMPLE_COLUMNS))
    parts = UnitManifest(done, records)
    if (repeated := parts.repeated_key()) is not None:
        warn(repeated)
    head = {"format": identity["format"], "options": identity, "labels": parts.labels(), "fields": parts.field_names,
            "max_fields": parts.max_fields(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created())),
            "shards": parts.shards(), "extensions": parts.extensions or [""], "checksum": DEFAULT_CHECKSUM,
            "skipped": [entry for unit in done for entry in unit.skipped]}
    save_manifest(output, head, parts.samples(lambda: display.advance(1)), parts.blocks(), parts.keys)


def _absolute(source: str) -> str:
    return source if "://" in source else os.path.abspath(source)


def _fingerprint(units: list) -> str:
    """A digest of the units (and, for local files, their sizes and modification times): a resumed pack must read
    the same input."""
    digest = hashlib.sha256()
    for unit in units:
        stat = os.stat(unit.path) if "://" not in unit.path else None
        digest.update(json.dumps([*unit, stat and stat.st_size, stat and stat.st_mtime_ns]).encode())
    return digest.hexdigest()

"""`pack()`: walk -> plan -> execute -> manifest, with one progress line and resume after any kill.

0. OUTPUT is checked (not a file, not in SOURCE), created and locked for the whole run (locks.py),
   so that a second run into it stops before it touches anything.
1. The walk streams SOURCE into compact columns (corpus.py), names spooled to an unnamed file.
2. The plan (pack_plan.py, pure) orders the files and cuts blocks and shards; shards finished by an
   earlier run (their records in ``OUTPUT/.corgi-partial/``) are taken out of it.
3. The driver writes the samples in pack order to a table in the partial folder (table.py) and
   lets go of the corpus; each shard still to write becomes a `ShardTask` of a few numbers.
4. An executor runs `encode.write_shard` over the tasks: each reads its files, runs the pack-time
   transforms and size filter on each sample (`PackOptions.transforms`), encodes, writes and
   fsyncs its whole shard into OUTPUT, saves its record and renames the shard into place.
5. The manifest is built from the records and the table, a column at a time (columns.py), and
   written last; then the partial folder goes.

The driver therefore holds at most a few tens of bytes per file (numpy columns, never a Python
object per file), whatever the corpus, and the shards do not depend on the executor or `workers`.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path


from corgi_io.storage.atomic import temp_name
from corgi_io.manifest.checksum import DEFAULT_CHECKSUM
from corgi_io.arguments import check_number
from corgi_io.errors import PackError, plain_message
from corgi_io.formats import get_format
from corgi_io.storage.locks import FolderLock
from corgi_io.manifest import MANIFEST_VERSION, SAMPLE_COLUMNS, open_manifest, save_manifest
from corgi_io.packing import layout
from corgi_io.packing.columns import ManifestColumns
from corgi_io.packing.corpus import check_source, discover
from corgi_io.packing.skip_reasons import empty_corpus, warn
from corgi_io.packing.encode import ShardTask, write_shard
from corgi_io.packing.dedup_pass import HashTask, find_duplicates, hash_file, run_hashes
from corgi_io.packing.executors import RESUME_HINT, open_executor
from corgi_io.packing.field_masks import check_field_count, pack_names
from corgi_io.packing.output import check_output, claim_output, finish_output, open_output, open_partial
from corgi_io.packing.pack_plan import PackOptions, PackPlan, make_plan
from corgi_io.packing.progress_bar import PackProgress
from corgi_io.packing.records import load_finished, record_path
from corgi_io.packing.user_code import load_function
from corgi_io.packing.sources.forms import SOURCE_MODULES, source_form
from corgi_io.packing.table import Table, write_table
from corgi_io.packing.sample_rules import OutputRules
from corgi_io.packing.unit_pipeline import pack_units

__all__ = ["PackOptions", "pack"]

DEFAULT_MAP_TIMEOUT = 600.0  # seconds a --map call may take on one sample (see `pack`; cli/pack.py says why)


def pack(source, output, options: PackOptions = PackOptions(), *, workers: int = 1, strict: bool = False,
         overwrite: bool = False, progress: bool | None = None, client=None,
         map_timeout: float | None = DEFAULT_MAP_TIMEOUT):
    """Pack SOURCE into block-structured shards plus a manifest in OUTPUT; returns the opened Manifest.

    SOURCE is a folder tree or a listing of raw files (this module), or existing WebDataset tars,
    TFRecord files, Parquet tables or JSONL files, packed a unit at a time (unit_pipeline.py); its
    form is detected from what it holds, or `options.source_form`.

    `workers` processes write shards (1: this process; a pack with a --map runs it in one worker
    process all the same, so that a map that crashes is reported), or the workers of a Dask cluster
    when `client` (a ``distributed.Client``) is given; OUTPUT must then be on a file system that the
    driver and every worker share, and the shards are the same bytes.  `map_timeout`: the most
    seconds the --map function may take on one sample in a local worker (None or 0: no limit).
    `progress=None` shows the progress line only on a terminal.  Rerunning after an interruption
    resumes: finished shards are kept, the rest rewritten.  A pack that ends without its manifest
    always raises (a CorgiError), whatever stopped it, SystemExit included.
    """
    fmt = get_format(options.format)
    if options.order not in layout.ORDERS:
        raise PackError(f"order must be one of {layout.ORDERS}, not {options.order!r}")
    if options.size_fn:
        load_function(options.size_fn, "--size-fn")  # fail before any work, not in every task
    if map_timeout is not None:
        check_number("map_timeout", map_timeout)
    output = Path(output).absolute()  # tasks may run elsewhere, in another working directory
    source = os.fspath(source)
    form = source_form(source, options.source_form)
    try:
        with _locked_output(source, form, output), PackProgress(progress) as display, \
                open_executor(workers, client, isolate=bool(options.map_function),
                              timeout=map_timeout or None) as executor:  # the lock outlives the workers
            if form in SOURCE_MODULES:
                pack_units(source, form, output, options, executor, display, strict=strict, overwrite=overwrite,
                           created=_created)
            else:
                _pack(Path(source), output, options, fmt, executor, display, strict=strict, overwrite=overwrite)
    except OSError as exc:  # a full disk, say: one line that names the file, and the finished shards stay
        if exc.filename is None:
            raise
        raise PackError(f"{exc.filename}: {exc.strerror or exc} ({RESUME_HINT})") from exc
    except SystemExit as exc:  # user code (a --size-fn) that called sys.exit: not a finished pack
        raise PackError(f"{output}: the pack stopped: {plain_message(exc)} ({RESUME_HINT})") from None
    return open_manifest(output)


@dataclass(frozen=True)
class Staged:
    """What the driver keeps once the corpus is planned and written to the pack-order table: the plan's
    layout and a few names, nothing per file."""

    plan: PackPlan       # staged: without its order, which the table holds
    table: Table
    output: Path
    partial: Path
    head: dict           # the manifest head so far: format, options, labels, created
    base: str            # folder that sample names are relative to
    extensions: tuple
    skipped: list        # inputs the walk skipped
    finished: dict       # {shard: ShardDone} of shards an earlier run finished
    known_fields: tuple  # the field names the walk and the transforms say the samples have (a --map may add others)
    known_extensions: tuple  # the primary field names they say
    duplicates: str | None = None  # --dedup: the mask of the positions to leave out (dedup_pass.py)


def _pack(source: Path, output: Path, options: PackOptions, fmt, executor, display, *, strict: bool,
          overwrite: bool) -> None:
    """The pack in a checked, created and locked OUTPUT.  An OSError before the shards are written is reported
    as it is; from then on `pack` adds that finished shards are kept, and a rerun resumes."""
    with _before_shards(output):
        open_output(output, overwrite)
        staged = _walk_and_plan(source, output, options, fmt, display, strict=strict, overwrite=overwrite)
    if staged is None:
        return  # OUTPUT already holds this pack, finished
    if options.dedup:
        staged = _deduplicated(executor, staged, options, display)
    records = _write_shards(executor, staged, options, strict, display)
    _write_manifest(staged, records, display)
    finish_output(output)


@contextlib.contextmanager
def _locked_output(source: str, form: str, output: Path):
    """Check SOURCE (of `form`) and OUTPUT, create OUTPUT and hold its lock for the body; nothing is written before
    the lock."""
    with _before_shards(output):
        if form not in SOURCE_MODULES:
            check_source(Path(source))
        if "://" not in source:
            check_output(Path(source), output)
        output.mkdir(parents=True, exist_ok=True)
    with FolderLock(output, warn):
        yield


@contextlib.contextmanager
def _before_shards(output: Path):
    """An OSError as a one-line PackError that names its file (else OUTPUT, where the walk spools its columns) and
    promises nothing: no shard was being written."""
    try:
        yield
    except OSError as exc:
        raise PackError(f"{exc.filename or output}: {exc.strerror or exc}") from exc


def _walk_and_plan(source: Path, output: Path, options: PackOptions, fmt, display, *, strict: bool,
                   overwrite: bool):
    """Walk SOURCE, claim OUTPUT, plan, write the table; None when OUTPUT already holds this very pack."""
    display.phase("walk", "file")
    corpus = discover(source, options.kind, options.label_index, strict, spool_dir=output, progress=display.advance,
                      max_sample_bytes=options.max_sample_bytes, primary=options.primary, require=options.require)
    try:
        identity = json.loads(json.dumps(dict(asdict(options), source=str(source.resolve()),
                                              manifest_version=MANIFEST_VERSION, corpus=corpus.fingerprint,
                                              transforms=options.transforms().options())))
        if claim_output(output, identity, overwrite):
            return None
        return _stage(corpus, options, fmt, output, open_partial(output, identity), identity, display)
    finally:
        corpus.close()


def _stage(corpus, options: PackOptions, fmt, output: Path, partial: Path, identity: dict, display) -> Staged:
    """Plan the corpus, take out the shards an earlier run finished, and write the pack-order table."""
    display.phase("plan", "sample", total=len(corpus))
    plan = make_plan(corpus.nbytes, corpus.key_bytes, options, fmt, corpus.fields)
    finished = {}
    for shard in range(plan.num_shards):
        name = plan.shard_name(shard)
        if (done := load_finished(output / name, record_path(partial, name))) is not None:
            finished[shard] = done
    plan = plan.without(finished)
    table = Table(str(partial / temp_name("table.rows")), str(partial / temp_name("table.strings")))
    write_table(table, corpus, plan.order)
    display.advance(len(corpus))
    fields, extensions = _known_names(corpus, options)
    head = {"format": options.format, "options": identity, "labels": corpus.labels,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_created()))}
    return Staged(plan.staged(), table, output, partial, head, corpus.base, tuple(corpus.extensions),
                  corpus.skipped, finished, fields, extensions)


def _known_names(corpus, options: PackOptions) -> tuple:
    """(field names, primary field names) that the samples have as the transforms leave them, as far as the
    driver knows: the walk's, renamed by --image-format (``png`` -> ``jpg``), with the ``tokens.npy`` that
    --tokenizer makes primary and without the text --drop-text drops.  A user's --map may make others: the shard
    records name every field written (field_masks.py), and the manifest lists these first, then those."""
    primary, dropped = options.primary_after(), options.dropped_fields()
    fields = [*map(options.renamed, corpus.field_names)] + ([primary] if primary else [])
    extensions = [primary] if primary else [*map(options.renamed, corpus.extensions)]
    return tuple(name for name in dict.fromkeys(fields) if name not in dropped), tuple(dict.fromkeys(extensions))


def _created():
    """When the pack was made: now, or SOURCE_DATE_EPOCH (seconds) when set, so that two runs can give
    byte-identical manifests (the reproducible-builds convention)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return None
    if not epoch.isdigit():
        raise PackError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds")
    return int(epoch)


def _deduplicated(executor, staged: Staged, options: PackOptions, display) -> Staged:
    """`staged` with the duplicates mask of a hashing pass over every shard's rows (dedup_pass.py)."""
    plan = staged.plan
    tasks = [HashTask(str(hash_file(staged.partial, shard)), staged.table, *plan.positions(shard), staged.base,
                      options=options) for shard in range(plan.num_shards)]
    run_hashes(executor, tasks, display)
    path, _, _ = find_duplicates([task.out for task in tasks], staged.partial)
    return replace(staged, duplicates=path)


def _write_shards(executor, staged: Staged, options: PackOptions, strict: bool, display) -> dict:
    """Run a ShardTask per shard still to write; returns {shard: ShardDone} for every shard, earlier ones too."""
    plan, output = staged.plan, OutputRules.of(options)
    tasks = (ShardTask(shard, str(staged.output / plan.shard_name(shard)),
                       str(record_path(staged.partial, plan.shard_name(shard))), staged.table,
                       plan.shard_blocks(shard), staged.base, staged.extensions, options.format, options.size_fn,
                       strict, output, staged.duplicates)
             for shard in plan.todo)
    display.phase("write", "sample", total=sum(stop - first for first, stop in map(plan.positions, plan.todo)))
    records = dict(staged.finished)
    for done in executor.run(write_shard, tasks, display.advance):
        records[done.shard] = done
        display.skipped(done.skipped)
    return records


def _write_manifest(staged: Staged, records: dict, display) -> None:
    """The manifest from the shards' records and the table, one column at a time."""
    plan = staged.plan
    display.phase("manifest", "column", total=len(SAMPLE_COLUMNS))
    done = [records[shard] for shard in range(plan.num_shards)]
    skipped = staged.skipped + [entry for record in done for entry in record.skipped]
    if not any(record.samples for record in done):  # every sample the walk kept was skipped when written
        raise empty_corpus(staged.head["options"]["source"], skipped)
    fields = check_field_count(pack_names(staged.known_fields, (record.field_names for record in done)))
    extensions = pack_names(staged.known_extensions, (record.extensions for record in done))
    columns = ManifestColumns(plan, staged.table, {shard: record_path(staged.partial, plan.shard_name(shard))
                                                   for shard in range(plan.num_shards)}, done, fields, extensions)
    starts = [0, *itertools.accumulate(record.samples for record in done)]
    head = dict(staged.head, shards=[{"path": plan.shard_name(shard), "bytes": record.bytes, "first_sample": start,
                                      "samples": record.samples} for shard, (record, start) in enumerate(zip(done, starts))])
    head.update(fields=fields, max_fields=max([record.max_fields for record in done] + [1]),
                extensions=extensions or [""], checksum=DEFAULT_CHECKSUM)
    head["skipped"] = skipped
    save_manifest(staged.output, head, columns.samples(lambda: display.advance(1)), columns.blocks(), columns.keys)

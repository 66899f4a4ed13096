"""`pack()`: SOURCE -> units -> one task per unit -> manifest, with one progress line and resume after any kill.

0. OUTPUT is checked (not a file, not in SOURCE), created and locked for the whole run (locks.py),
   so that a second run into it stops before it touches anything.
1. SOURCE is planned as units (planning.py): a folder's or listing's walk, pure plan and pack-order
   table, one unit per planned shard; or the tars, TFRecord files, Parquet row groups or JSONL
   files of existing shards and tables.  OUTPUT is claimed with the pack's identity.
2. Units an earlier run finished (their record in ``OUTPUT/.corgi-partial/`` and every shard at
   its recorded size) are kept; with --dedup a hashing pass over every unit finds the duplicates
   (dedup_pass.py).
3. An executor (a local pool or Dask) runs `unit_task.write_unit` on each unit left: the one path
   of every sample (rules, transforms, encoder, blocks and shards), its record saved before its
   shards are renamed into place.
4. The manifest is built from the records, a column at a time (manifest_columns.py), and written
   last; then the partial folder goes.

An OUTPUT in an object store (s3://) is packed the same way in a local staging folder, each unit
uploaded by its task as it is finished and the manifest last, under a lock object (remote_output.py).

The driver holds a few numbers per unit, never a Python object per sample, and the shards do not
depend on the executor or `workers`.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from corgi_io.arguments import check_number
from corgi_io.errors import CorgiError, PackError, plain_message
from corgi_io.formats import get_format
from corgi_io.manifest import SAMPLE_COLUMNS, open_manifest, save_manifest
from corgi_io.manifest.checksum import DEFAULT_CHECKSUM
from corgi_io.packing import layout
from corgi_io.packing.corpus import check_source
from corgi_io.packing.dedup_pass import find_units_duplicates
from corgi_io.packing.executors import RESUME_HINT, open_executor
from corgi_io.packing.manifest_columns import PackColumns
from corgi_io.packing.output import check_output, claim_output, finish_output, open_output, open_partial
from corgi_io.packing.pack_plan import PackOptions
from corgi_io.packing.planning import Planned, plan_folder, plan_streams
from corgi_io.packing.progress_bar import PackProgress
from corgi_io.packing.records import load_done, record_path
from corgi_io.packing.remote_output import remote_output
from corgi_io.packing.skip_reasons import empty_corpus, warn
from corgi_io.packing.sources.forms import SOURCE_MODULES, source_form
from corgi_io.packing.unit_task import WriteTask, write_unit
from corgi_io.packing.user_code import load_function
from corgi_io.storage.locks import FolderLock
from corgi_io.storage.upload import is_object_store, read_options

__all__ = ["PackOptions", "pack"]

DEFAULT_MAP_TIMEOUT = 600.0  # seconds a --map call may take on one sample (see `pack`; cli/pack.py says why)


def pack(source, output, options: PackOptions = PackOptions(), *, workers: int = 1, strict: bool = False,
         overwrite: bool = False, progress: bool | None = None, client=None,
         map_timeout: float | None = DEFAULT_MAP_TIMEOUT, storage_options: dict | None = None, staging=None):
    """Pack SOURCE into block-structured shards plus a manifest in OUTPUT; returns the opened Manifest.

    SOURCE is a folder tree or a listing of raw files, or existing WebDataset tars, TFRecord files,
    Parquet tables or JSONL files, each packed a unit at a time (planning.py); its form is detected
    from what it holds, or `options.source_form`.

    `workers` processes write shards (1: this process; a pack with a --map runs it in one worker
    process all the same, so that a map that crashes is reported), or the workers of a Dask cluster
    when `client` (a ``distributed.Client``) is given; OUTPUT must then be on a file system that the
    driver and every worker share, and the shards are the same bytes.  `map_timeout`: the most
    seconds the --map function may take on one sample in a local worker (None or 0: no limit).
    `progress=None` shows the progress line only on a terminal.  Rerunning after an interruption
    resumes: finished shards are kept, the rest rewritten.  A pack that ends without its manifest
    always raises (a CorgiError), whatever stopped it, SystemExit included.

    OUTPUT may be an object store's URL (s3://bucket/prefix, with fsspec's `storage_options`): the pack is
    staged in the folder `staging` (default: a temporary one) and uploaded as it is finished, its manifest
    last, under a lock object (remote_output.py); a rerun resumes from what the store holds.
    """
    fmt = _checked_format(options, map_timeout)
    source = os.fspath(source)
    form = source_form(source, options.source_form)
    to_store = is_object_store(output)
    with remote_output(os.fspath(output), storage_options, staging) if to_store else contextlib.nullcontext() as remote:
        folder = remote.staging if remote else Path(output).absolute()  # tasks may run in another working directory
        try:
            with _locked_output(source, form, folder, remote), PackProgress(progress) as display, \
                    open_executor(workers, client, isolate=bool(options.map_function),
                                  timeout=map_timeout or None) as executor:  # the lock outlives the workers
                _pack(source, form, folder, remote, options, fmt, executor, display, strict=strict,
                      overwrite=overwrite)
        except OSError as exc:  # a full disk, say: one line that names the file, and the finished shards stay
            if exc.filename is None:
                raise
            raise PackError(f"{exc.filename}: {exc.strerror or exc} ({RESUME_HINT})") from exc
        except SystemExit as exc:  # user code (a --size-fn) that called sys.exit: not a finished pack
            raise PackError(f"{remote.url if remote else folder}: the pack stopped: {plain_message(exc)} "
                            f"({RESUME_HINT})") from None
    return open_manifest(remote.url, read_options(storage_options)) if remote else open_manifest(folder)


def _checked_format(options: PackOptions, map_timeout) -> object:
    """The format module of `options`, once the options that can fail before any work are checked."""
    fmt = get_format(options.format)
    if options.order not in layout.ORDERS:
        raise PackError(f"order must be one of {layout.ORDERS}, not {options.order!r}")
    if options.size_fn:
        load_function(options.size_fn, "--size-fn")  # fail before any work, not in every task
    if map_timeout is not None:
        check_number("map_timeout", map_timeout)
    return fmt


def _pack(source: str, form: str, output: Path, remote, options: PackOptions, fmt, executor, display, *,
          strict: bool, overwrite: bool) -> None:
    """The pack in a checked, created and locked OUTPUT (the staging folder of `remote`, a RemoteOutput, when
    given).  An OSError before the shards are written is reported as it is; from then on `pack` adds that
    finished shards are kept, and a rerun resumes."""
    def claim(recorded: dict):
        if claim_output(output, recorded, overwrite):
            return None
        partial = open_partial(output, recorded)
        if remote is not None:
            remote.upload_plan(partial)
        return partial

    if remote is not None:
        remote.open(overwrite)
    with _before_shards(output):
        open_output(output, overwrite)
        planned = (plan_streams(source, form, options, display, claim) if form in SOURCE_MODULES else
                   plan_folder(Path(source), output, options, fmt, display, claim, strict=strict))
    if planned is None:
        return  # OUTPUT already holds this pack, finished
    done = _write_units(executor, planned, output, remote, strict, display)
    _write_manifest(output, planned, done, display, check_keys=form in SOURCE_MODULES)
    if remote is not None:
        remote.publish()
    finish_output(output)


def _write_units(executor, planned: Planned, output: Path, remote, strict: bool, display) -> list:
    """Run a WriteTask per unit an earlier run did not finish (with `remote`, uploading each unit as it is done);
    the UnitDone of every unit, in order."""
    units, records = planned.units, [record_path(planned.partial, index) for index in range(len(planned.units))]
    shard_size = None if remote is None else remote.shard_size
    done = {index: found for index, path in enumerate(records)
            if (found := load_done(path, output, shard_size)) is not None}
    duplicates, bounds = find_units_duplicates(executor, units, planned.partial, planned.options, display)
    todo = [index for index in range(len(units)) if index not in done]
    totals = [units[index].samples for index in todo]
    tasks = (WriteTask(index, units[index], str(output), str(records[index]), planned.options, strict, duplicates,
                       bounds[index]) for index in todo)
    display.phase("write", "sample", total=None if None in totals else sum(totals))
    for result in executor.run(write_unit if remote is None else remote.task_function(), tasks, display.advance):
        done[result.index] = result
        display.skipped(result.skipped)
    return [done[index] for index in range(len(units))]


def _write_manifest(output: Path, planned: Planned, done: list, display, *, check_keys: bool) -> None:
    """The manifest of the finished units, one column at a time.  With `check_keys` (shards or tables: a folder's
    or listing's walk already refused repeated keys, keys.check_unique) a key that two samples share is warned of."""
    skipped = [*planned.skipped, *(entry for unit in done for entry in unit.skipped)]
    if not any(unit.samples for unit in done):  # every sample was skipped
        raise empty_corpus(planned.identity["source"], skipped)
    display.phase("manifest", "column", total=len(SAMPLE_COLUMNS))
    parts = PackColumns(done, [record_path(planned.partial, index) for index in range(len(done))], planned.known)
    if check_keys and (repeated := parts.repeated_key()) is not None:
        warn(repeated)
    head = {"format": planned.identity["format"], "options": planned.identity,
            "labels": parts.labels() if planned.labels is None else planned.labels, "fields": parts.field_names,
            "max_fields": parts.max_fields(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_created())),
            "shards": parts.shards(), "extensions": parts.extensions or [""], "checksum": DEFAULT_CHECKSUM,
            "skipped": skipped}
    save_manifest(output, head, parts.samples(lambda: display.advance(1)), parts.blocks(), parts.keys, parts.fields())


@contextlib.contextmanager
def _locked_output(source: str, form: str, output: Path, remote):
    """Check SOURCE (of `form`) and OUTPUT, create OUTPUT and hold its lock (and the lock object of `remote`, a
    RemoteOutput whose staging folder OUTPUT is) for the body; nothing is written before the locks."""
    with _before_shards(output):
        if form not in SOURCE_MODULES:
            check_source(Path(source))
        if "://" not in source:
            check_output(Path(source), output)
        output.mkdir(parents=True, exist_ok=True)
    with remote.locked(warn) if remote is not None else contextlib.nullcontext(), FolderLock(output, warn):
        yield


@contextlib.contextmanager
def _before_shards(output: Path):
    """An OSError as a one-line PackError that names its file (else OUTPUT, where the walk spools its columns) and
    promises nothing: no shard was being written."""
    try:
        yield
    except CorgiError:  # a remote OUTPUT's StorageError names its URL
        raise
    except OSError as exc:
        raise PackError(f"{exc.filename or output}: {exc.strerror or exc}") from exc


def _created():
    """When the pack was made: now, or SOURCE_DATE_EPOCH (seconds) when set, so that two runs can give
    byte-identical manifests (the reproducible-builds convention)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return None
    if not epoch.isdigit():
        raise PackError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds")
    return int(epoch)

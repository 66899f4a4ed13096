"""The dataset manifest: the contract between `corgi pack` and everything that reads a pack.

A pack directory holds, beside its shards:

* ``manifest.json`` - the head: format version, shard format, creation options, label and
  extension indexes, the checksum function, shards, a summary of the skipped inputs, and the
  row counts of the columns.  Human-readable.
* ``columns/skipped.jsonl`` - the skip records, a ``{"path", "reason"}`` line each (version 4 on;
  before, the head listed them), read only when asked (`Manifest.skip_records`: skips.py).
* ``columns/<name>.npy`` - one flat, uncompressed array per per-sample or per-block column
  (and the keys as one UTF-8 blob plus offsets; version 6 on, a row per field of each sample too:
  where it lies and its checksum, `field_ranges`).  Local packs memory-map them, so opening a
  pack does not copy them and every process on a node shares one page cache; remote packs
  read the block columns whole and the per-sample rows on demand: a version-5 pack a block's row group at a
  time (`row_groups.py`: one request brings many blocks' rows), an older one page by page (`RangedColumn`).

The columns are written first and the head last, each atomically, so a head on disk always
describes complete columns.  Every input is untrusted: the head is type-checked, every
column's dtype, length and file size must match the schema and the head before it is read.
Opening costs O(blocks + shards): the block and shard tables are validated whole, and the
per-sample rows of a block when a process first uses them (`Manifest.validate_rows`; `corgi
verify` validates every row).  Any problem raises :class:`ManifestError` with one line naming
the file.  Version-1 packs (one ``manifest.npz``, zlib CRC32) still open.

What a reader tolerates, on purpose: head fields it does not know are ignored (a change that
older readers must not ignore bumps ``corgi_manifest_version``); ``options`` is opaque (only a
resumed `corgi pack` compares it); files in ``columns/`` that the schema does not name are
never opened.  A local manifest file may be a symlink only to a regular file inside the pack
root.  Shard files are not looked at here (that would be one stat per shard): their paths must
be safe relative paths, and the readers check their sizes on first read.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corgi_io.manifest.columns import (checked_size, column_from_bytes, map_local_column, most_bytes, open_ranged_column,
                                   prefetch, prefetch_rows, read_npz_members)
from corgi_io.errors import ManifestError
from corgi_io.manifest.field_ranges import FieldRanges, LabelMembers, field_ranges, label_members
from corgi_io.manifest.row_group_writer import check_against_columns
from corgi_io.manifest.row_groups import RowGroups, read_table
from corgi_io.manifest.schema import (BLOCK_COLUMNS, BLOCKS_PATH, COLUMNS_DIR, FIELD_COLUMNS, FIELD_RANGES_SINCE,
                                      HEAD_NAME, ROWS_AT_ONCE, ROWS_PATH, ROWS_SINCE, SKIPS_PATH, SKIPS_SINCE,
                                      V1_COLUMNS_NAME, column_path, column_schema, declared_rows, sample_columns)
from corgi_io.manifest.skips import head_summary, read_skip_records
from corgi_io.manifest.tables import Columns, ShardTable
from corgi_io.manifest.checks import check_block_rows, check_tables, parse_head
from corgi_io.manifest.limits import MAX_HEAD_BYTES
from corgi_io.manifest.fields import KINDS



@dataclass(frozen=True, eq=False)
class Manifest:
    """An opened pack: head fields plus per-sample (`samples`) and per-block (`blocks`) columns.

    The block table is validated at open; per-sample rows are validated by `validate_rows`,
    once per block per process (`keys` and `key` call it for the rows they decode).  Pickling
    keeps only (root, storage options): an unpickled Manifest reopens the pack, so a spawned
    DataLoader worker maps the same files instead of receiving a copy of the columns.
    """

    root: str
    version: int
    format: str
    checksum: str
    options: dict
    labels: list
    extensions: list
    shards: ShardTable
    skips: dict        # summary of the skip records: count, reasons {reason: count} (and the skip file's bytes)
    samples: Columns
    blocks: Columns
    key_blob: np.ndarray = field(repr=False)
    key_offsets: np.ndarray = field(repr=False)
    storage_options: dict = field(default_factory=dict, repr=False)
    columns_url: str = field(default="", repr=False)       # the file that row errors name
    rows_checked: np.ndarray = field(default=None, repr=False)  # per block: rows validated in this process
    fields: list = field(default_factory=lambda: [""])     # field names, bit i of samples.fields (before version 3:
    max_fields: int = 1                                    # `extensions`, one field per sample) and the most a sample has
    row_groups: object = field(default=None, repr=False)   # a remote version-5 pack's RowGroups: its rows' one source
    rows_bytes: int = 0                                    # the size of columns/rows.bin (version 5 on)
    field_start: np.ndarray = field(default=None, repr=False)  # version 6 on: sample i's field rows are
    field_rows: Columns = field(default=None, repr=False)      # field_rows[field_start[i]:field_start[i + 1]] (None
                                                               # before: no per-field ranges); see field_ranges

    def __reduce__(self):
        return open_manifest, (self.root, self.storage_options)

    @property
    def num_samples(self) -> int:
        return len(self.key_offsets) - 1

    def skip_records(self):
        """Each skip record ({"path", "reason"}: an input the pack did not pack, and why), read from the pack a
        line at a time when asked and checked against the head's summary (ManifestError naming the file and
        byte offset).  An opened Manifest holds only the summary (`skips`), whatever the records' number."""
        from corgi_io.storage import open_storage

        with open_storage(self.root, **self.storage_options) as storage:
            if self.version >= SKIPS_SINCE:
                yield from read_skip_records(storage, self.skips, storage.url(SKIPS_PATH))
            else:  # the head lists them: parsed again, not kept
                raw = _read_whole(storage, HEAD_NAME, MAX_HEAD_BYTES)
                yield from parse_head(raw, storage.url(HEAD_NAME))["skipped"]

    def validate_rows(self, start: int = 0, stop: int | None = None) -> None:
        """Check the per-sample rows of every block holding a sample in [start, stop) (all by default).

        Raises ManifestError naming the columns for the first disagreement.  A block is checked
        once per process: call it before using a block's rows; a checked range costs microseconds.
        """
        stop = self.num_samples if stop is None else min(stop, self.num_samples)
        if start >= stop:
            return
        first = self.blocks.first
        lo, hi = first.searchsorted((start, stop - 1), "right").tolist()
        lo -= 1
        if self.rows_checked[lo] if hi - lo == 1 else self.rows_checked[lo:hi].all():
            return
        todo = lo + np.flatnonzero(~self.rows_checked[lo:hi])
        for run in np.split(todo, np.flatnonzero(np.diff(todo) != 1) + 1) if len(todo) else ():
            self._check_blocks(int(run[0]), int(run[-1]) + 1)

    def _check_blocks(self, lo: int, hi: int) -> None:
        """Validate blocks [lo, hi) in steps of about ROWS_AT_ONCE rows (a sample's and its field rows: at most
        1 + max_fields a sample), fetching each step's rows first."""
        first, count = self.blocks.first, self.blocks.count
        samples = ROWS_AT_ONCE // (1 + self.max_fields) if self.field_start is not None else ROWS_AT_ONCE
        while lo < hi:
            step = min(hi, max(lo + 1, int(np.searchsorted(first, first[lo] + samples))))
            start, stop = int(first[lo]), int(first[step - 1] + count[step - 1])
            if self.row_groups is not None:
                self.row_groups.ensure(lo, step)  # every column, the keys and fields of these blocks, in one request
            else:
                prefetch_rows((*self.samples.arrays.values(), self.key_offsets,
                               *(() if self.field_start is None else (self.field_start,))), start, stop + 1)
                prefetch(self.key_blob, self.key_offsets[start], self.key_offsets[stop])  # unchecked yet: clamped
                if self.field_start is not None:
                    prefetch_rows(self.field_rows.arrays.values(), self.field_start[start], self.field_start[stop])
            check_block_rows(self, lo, step, self.columns_url)
            self.rows_checked[lo:step] = True
            lo = step

    def check_row_groups(self) -> None:
        """`corgi verify`'s check that a local version-5 pack's row groups (what remote readers read) equal its
        columns (what local readers map); nothing to compare for older or remote packs."""
        if self.version < ROWS_SINCE or self.row_groups is not None:
            return
        from corgi_io.storage import open_storage

        with open_storage(self.root, **self.storage_options) as storage:
            check_against_columns(self, storage, self.rows_bytes)

    def share_rows(self, folder: str) -> None:
        """Keep the row groups this process fetches in `folder`, shared by a node's processes (`RowGroups.share`);
        nothing to do for a local or pre-version-5 pack."""
        if self.row_groups is not None:
            self.row_groups.share(folder)

    def expect_blocks(self, blocks) -> None:
        """The blocks this process will read, in order (a worker's plan): a remote version-5 pack fetches their
        rows with those it is asked for, FETCH_BYTES at a time (`RowGroups`); elsewhere nothing to do."""
        if self.row_groups is not None:
            self.row_groups.expect(blocks)

    @property
    def has_field_ranges(self) -> bool:
        """Whether the pack records each field's byte range and checksum (version 6 on)."""
        return self.field_start is not None

    def field_ranges(self, start: int = 0, stop: int | None = None, fields=None) -> FieldRanges:
        """Where each field of samples [start, stop) lies, only `fields` (names) when given: numpy arrays of sample,
        field (an index into `self.fields`, not into the `fields` asked for), framing start, payload offset and
        length, and the payload's CRC32C (field_ranges.py).  ManifestError for a pack before version 6, ArgumentError for a name it lacks."""
        return field_ranges(self, start, stop, fields)

    def label_members(self, start: int = 0, stop: int | None = None) -> LabelMembers:
        """The ``<key>.cls`` tar members (header, payload offset and length) of the labeled samples of [start, stop)
        of a WebDataset pack (field_ranges.py): with `field_ranges`, every member of its tars."""
        return label_members(self, start, stop)

    def key(self, index: int) -> str:
        """The key of sample `index`, decoded on demand."""
        index = int(index) + self.num_samples if index < 0 else int(index)
        return self.keys(index, index + 1)[0]

    def keys(self, start: int = 0, stop: int | None = None) -> list:
        """The keys of samples [start, stop), decoded in one pass (all keys by default)."""
        stop = self.num_samples if stop is None else stop
        self.validate_rows(start, stop)
        bounds = np.asarray(self.key_offsets[start:stop + 1])
        blob, bounds = self.key_blob[bounds[0]:bounds[-1]].tobytes(), (bounds - bounds[0]).tolist()
        return [blob[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]

    def kind_name(self, index: int) -> str:
        return KINDS[int(self.samples.kind[index])]

    def field_counts(self) -> list:
        """How many samples hold each of `fields`, a chunk of rows at a time (before version 3: by extension)."""
        if "fields" not in self.samples.arrays:
            return np.bincount(np.asarray(self.samples.ext), minlength=len(self.fields)).tolist()
        counts = np.zeros(64, dtype=np.int64)
        for start in range(0, self.num_samples, ROWS_AT_ONCE):
            masks = np.asarray(self.samples.fields[start:start + ROWS_AT_ONCE], dtype="<u8")
            counts += np.unpackbits(masks.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little").sum(axis=0, dtype=np.int64)
        return counts[:len(self.fields)].tolist()




def open_manifest(source, storage_options: dict | None = None) -> Manifest:
    """Open a pack at a local path or fsspec URL (or pass a Manifest through), in O(blocks + shards).

    The head, the block table and the shard table are read and validated whole; per-sample
    rows are mapped (local) or read on demand (remote) and validated by `Manifest.validate_rows`
    when first used.  `storage_options` go to `open_storage` (credentials, retry budgets).
    Raises ManifestError, with one line naming the file, for anything missing or malformed, and
    StorageError when the storage itself cannot be reached.
    """
    if isinstance(source, Manifest):
        return source
    from corgi_io.storage import open_storage

    root, storage_options = str(source), dict(storage_options or {})
    storage = open_storage(root, **storage_options)
    head_url = storage.url(HEAD_NAME)
    head = parse_head(_read_head(storage, head_url), head_url)
    arrays = _read_v1_columns(storage, head) if head["version"] == 1 else _open_columns(storage, head)
    where = storage.url(COLUMNS_DIR if head["version"] > 1 else V1_COLUMNS_NAME)
    manifest = _build(root, head, arrays, storage_options, where)
    check_tables(manifest, where)
    return manifest


def _read_head(storage, head_url: str) -> bytes:
    """manifest.json's bytes: a local one through `_read_whole` (a regular file inside the root), a remote one with
    `Storage.read_small` (one GET over HTTP: each round trip before the first batch is latency no read hides)."""
    missing = ManifestError(f"{head_url}: no manifest here (is this the OUTPUT of `corgi pack`?)")
    if storage.local_path(HEAD_NAME) is not None:
        if not storage.exists(HEAD_NAME):
            raise missing
        return _read_whole(storage, HEAD_NAME, MAX_HEAD_BYTES)
    try:
        size, raw = storage.read_small(HEAD_NAME, MAX_HEAD_BYTES)
    except FileNotFoundError:
        raise missing from None
    except (IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        raise ManifestError(f"{head_url}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if raw is None or len(raw) > MAX_HEAD_BYTES:  # too large, or it grew since its size was asked
        raise ManifestError(f"{head_url}: {max(size, len(raw or b''))} bytes, more than the {MAX_HEAD_BYTES} it may hold")
    return raw


def _read_whole(storage, relpath: str, most: int) -> bytes:
    """A whole manifest file of at most `most` bytes, its size checked before it is read.

    A missing, unreadable or oversized one is a ManifestError (so is a local one that is not a
    regular file inside the root); storage trouble is a StorageError.
    """
    where = storage.url(relpath)
    size = checked_size(storage, relpath, most, where)
    try:
        raw = storage.read_all(relpath)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        raise ManifestError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > most:  # it grew since its size was asked (or a server's size was wrong)
        raise ManifestError(f"{where}: {max(size, len(raw))} bytes, more than the {most} it may hold")
    return raw


def _open_columns(storage, head: dict) -> dict:
    """The columns of a version-2 pack: memory-mapped when local; when remote, the block
    columns read whole and the per-sample ones (and the keys) as RangedColumns."""
    if head["version"] >= ROWS_SINCE and storage.local_path(ROWS_PATH) is None:
        return _open_row_groups(storage, head)
    rows, arrays = declared_rows(head["counts"], head["version"]), {}
    for name, dtype in column_schema(head["version"]).items():
        relpath = column_path(name)
        url, local = storage.url(relpath), storage.local_path(relpath)
        per_sample = not name.startswith("block_")
        if local is not None:
            arrays[name] = map_local_column(local, storage.root, dtype, rows[name], url, scattered=per_sample)
        elif per_sample:
            arrays[name] = open_ranged_column(storage, relpath, dtype, rows[name], url)
        else:
            raw = _read_whole(storage, relpath, most_bytes(dtype, rows[name]))
            arrays[name] = column_from_bytes(raw, dtype, rows[name], url)
    return arrays


def _open_row_groups(storage, head: dict) -> dict:
    """The columns of a remote version-5 pack: the block table read whole (one GET), the per-sample columns and
    keys served by its `RowGroups` (under "row_groups")."""
    table = read_table(storage, head["counts"], head["version"], storage.url(BLOCKS_PATH))
    groups = RowGroups(storage, table, head["counts"], head["version"])
    arrays = {name if name.startswith(("key_", "field_")) else f"sample_{name}": column
              for name, column in groups.columns().items()}
    return {**arrays, **{f"block_{name}": table[name] for name in BLOCK_COLUMNS}, "row_groups": groups}


def _read_v1_columns(storage, head: dict) -> dict:
    """The columns of a version-1 pack (one uncompressed npz, zlib CRC32, no extension column)."""
    where = storage.url(V1_COLUMNS_NAME)
    raw = _read_whole(storage, V1_COLUMNS_NAME, head["columns_bytes"])
    if len(raw) != head["columns_bytes"]:
        raise ManifestError(f"{where}: {len(raw)} bytes, head says {head['columns_bytes']}")
    members = read_npz_members(raw, where)
    renamed = {"sample_checksum": "sample_crc32"}
    arrays = {}
    for name, dtype in column_schema(1).items():
        if name == "sample_ext":
            continue
        member = members.get(renamed.get(name, name))
        if member is None:
            raise ManifestError(f"{where}: missing column {renamed.get(name, name)!r}")
        arrays[name] = column_from_bytes(member, dtype, None, f"{where}: column {renamed.get(name, name)!r}")
    rows = max(len(arrays["key_offsets"]) - 1, 0)  # no offsets at all: validate() refuses them
    arrays["sample_ext"] = np.zeros(rows, dtype=np.uint16)  # extension unknown: ""
    return arrays


def _build(root: str, head: dict, arrays: dict, storage_options: dict, where: str) -> Manifest:
    samples = Columns({n: arrays[f"sample_{n}"] for n in sample_columns(head["version"])})
    blocks = Columns({n: arrays[f"block_{n}"] for n in BLOCK_COLUMNS})
    ranged = head["version"] >= FIELD_RANGES_SINCE
    field_rows = Columns({n: arrays[f"field_{n}"] for n in FIELD_COLUMNS}) if ranged else None
    return Manifest(root=root, version=head["version"], format=head["format"], checksum=head["checksum"],
                    options=head["options"], labels=head["labels"], extensions=head["extensions"],
                    shards=ShardTable(*head["shards"]), skips=head_summary(head), samples=samples,
                    blocks=blocks, key_blob=arrays["key_blob"], key_offsets=arrays["key_offsets"],
                    storage_options=storage_options, columns_url=where,
                    rows_checked=np.zeros(len(arrays["block_first"]), dtype=bool), fields=head["fields"],
                    max_fields=head["max_fields"], row_groups=arrays.get("row_groups"),
                    rows_bytes=head["counts"].get("rows_bytes", 0) if head["version"] > 1 else 0,
                    field_start=arrays.get("field_start"), field_rows=field_rows)

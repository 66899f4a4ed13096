"""Megatron-Energon's prepared dataset: what ``energon prepare PACK`` writes (Energon 7.4: its webdataset flavor's
``prepare.py``, ``indexing.py``, ``itar.py`` and ``structs.py``), from the manifest instead of a pass over the tars.

* ``shard-NNNNNN.tar.idx`` beside each shard: little-endian uint64s, each sample's first byte (its first member's
  header) in shard order, then where the last sample ends (the tar's end-of-archive marker);
* ``.nv-meta/index.sqlite``: ``samples(tar_file_id, sample_key, sample_index, byte_offset, byte_size)``, a row per
  sample (the shard's place in the shard list, the key, the sample's place in its shard, its record's range), and
  ``sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size)``, a row per tar
  member (``cls`` included) with its payload's range, with Energon's indexes; keys must be unique (Energon's rule);
* ``.nv-meta/index.uuid``: a fresh UUID (Energon's joins tell preparations apart by it);
* ``.nv-meta/split.yaml``: every shard in split part ``train``; ``.nv-meta/.info.json`` (COMMIT: Energon takes a
  folder with it for prepared, so `write_indexes` removes the pack's before anything is written and it is written
  last): the shard counts, in the manifest's order (a shard's place is its ``tar_file_id``);
* ``.nv-meta/dataset.yaml``, only where the pack has none: ``CrudeWebdataset`` (samples as dicts of their fields); the
  sample type and field map are the user's to choose (``energon prepare --sample-type ... --field-map ...``).

The members come from `members.shard_samples`: the manifest's per-field ranges, or the tar headers of older packs.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import struct
import uuid

from corgi_io.errors import ArgumentError
from corgi_io.indexes.members import shard_blocks, shard_samples
from corgi_io.manifest import ENERGON_META as META
from corgi_io.storage.atomic import atomic_output, temp_name

COMMIT = f"{META}/.info.json"  # says the rest is complete: removed first, written last (write_indexes)
TABLES = ("CREATE TABLE samples (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL UNIQUE, "
          "sample_index INTEGER NOT NULL, byte_offset INTEGER, byte_size INTEGER)",
          "CREATE TABLE sample_parts (tar_file_id INTEGER, sample_index INTEGER, part_name TEXT, "
          "content_byte_offset INTEGER, content_byte_size INTEGER)")
INDEXES = ("CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
           "CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
           "CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, "
           "content_byte_offset, content_byte_size)")
CRUDE = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
BATCH_PARTS = 4096  # member rows inserted at once (Energon's INDEX_BATCH_SIZE)


def tar_index_path(shard_path: str) -> str:
    """Energon's index of a shard: `shard-000000.tar` -> `shard-000000.tar.idx`."""
    return f"{shard_path}.idx"


def write(manifest, storage, folder: str) -> list:
    """Write Energon's files under `folder` (the pack's root, or where it is staged), each atomically, COMMIT last;
    the paths written, relative.  A `dataset.yaml` already in the pack (asked of its `storage`) is the user's and
    kept.  ArgumentError naming a key that two samples share."""
    os.makedirs(f"{folder}/{META}", exist_ok=True)
    written = [_write_tar_index(manifest, folder, shard) for shard in range(len(manifest.shards))]
    written.append(_write_sqlite(manifest, storage, folder))
    names = [manifest.shards.path(shard) for shard in range(len(manifest.shards))]
    files = {f"{META}/index.uuid": str(uuid.uuid4()),
             f"{META}/split.yaml": "split_parts:\n  train:\n" + "".join(f"  - {json.dumps(name)}\n" for name in names)
             + "exclude: []\n"}  # block style: Energon parses YAML with rapidyaml, not every form
    if not storage.exists(f"{META}/dataset.yaml"):
        files[f"{META}/dataset.yaml"] = CRUDE
    files[COMMIT] = json.dumps({"energon_version": "corgi-io", "shard_counts": dict(zip(
        names, (int(count) for count in manifest.shards.samples)))}, indent=2) + "\n"
    for relpath, text in files.items():
        with atomic_output(f"{folder}/{relpath}", "w") as out:
            out.write(text)
    return written + list(files)


def _write_tar_index(manifest, folder: str, shard: int) -> str:
    """Shard `shard`'s `.tar.idx`, a block of samples at a time (records start back to back from byte 0)."""
    relpath = tar_index_path(manifest.shards.path(shard))
    os.makedirs(os.path.dirname(f"{folder}/{relpath}"), exist_ok=True)  # a shard's folder, where staged for S3
    with atomic_output(f"{folder}/{relpath}", "wb") as out:
        end = 0
        for block in shard_blocks(manifest, shard):
            first, count = int(manifest.blocks.first[block]), int(manifest.blocks.count[block])
            manifest.validate_rows(first, first + count)
            out.write(manifest.samples.offset[first:first + count].astype("<u8").tobytes())
            end = int(manifest.blocks.offset[block] + manifest.blocks.length[block])
        out.write(struct.pack("<Q", end))
    return relpath


def _write_sqlite(manifest, storage, folder: str) -> str:
    """`.nv-meta/index.sqlite`, built under a temporary name and renamed into place when complete."""
    relpath = f"{META}/index.sqlite"
    path, tmp = f"{folder}/{relpath}", f"{folder}/{META}/{temp_name('index.sqlite')}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as db:
            for statement in TABLES:
                db.execute(statement)
            for shard in range(len(manifest.shards)):
                _insert_shard(manifest, storage, db, shard)
            for statement in INDEXES:
                db.execute(statement)
            db.commit()
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return relpath


def _insert_shard(manifest, storage, db, shard: int) -> None:
    """The rows of shard `shard`'s samples and members, BATCH_PARTS members at a time."""
    first = int(manifest.shards.first_sample[shard])
    samples, parts = [], []
    for index, (key, members) in enumerate(shard_samples(manifest, storage, shard)):
        row = first + index
        samples.append((shard, key, index, int(manifest.samples.offset[row]), int(manifest.samples.length[row])))
        parts += [(shard, index, m.field, m.offset, m.size) for m in members]
        if len(parts) >= BATCH_PARTS:
            _insert(manifest, db, samples, parts)
            samples, parts = [], []
    _insert(manifest, db, samples, parts)


def _insert(manifest, db, samples: list, parts: list) -> None:
    """Insert rows; ArgumentError naming the key and its shard when a key is already there (Energon needs every key
    once: `--from wds` packs of tars that number their samples alike repeat keys)."""
    db.execute("SAVEPOINT batch")
    try:
        db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", samples)
    except sqlite3.IntegrityError:
        db.execute("ROLLBACK TO SAVEPOINT batch")
        seen = set()
        key = next(row[1] for row in samples if row[1] in seen or seen.add(row[1]) or
                   db.execute("SELECT 1 FROM samples WHERE sample_key = ?", (row[1],)).fetchone())
        raise ArgumentError(f"{manifest.root}: key {key!r} (in {manifest.shards.path(samples[0][0])}) is held by two "
                            f"samples; Energon needs every key once (energon prepare --fix-duplicates renames them "
                            f"inside the tars)") from None
    db.executemany("INSERT INTO sample_parts VALUES (?, ?, ?, ?, ?)", parts)
    db.execute("RELEASE SAVEPOINT batch")

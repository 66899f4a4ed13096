"""Checking an untrusted manifest: the head's fields and types, then the columns against each other.

Three layers, each raising ManifestError with one line that names `where`:

* `parse_head` turns the JSON head into plain, typed fields;
* `check_tables` checks what is O(blocks + shards), when a pack is opened: the shard and
  block tables are in range, tile the samples, and every block lies inside its shard's
  samples and bytes;
* `check_block_rows` checks the per-sample rows of a run of blocks, vectorised: every number
  in range, each record inside its block and shard and contiguous with the previous one,
  payloads inside records, size sums equal to the block's, keys that index their blob and
  decode as UTF-8.  `Manifest.validate_rows` runs it on the blocks a process uses, when it
  first uses them, and on all of them for `corgi verify`.

Nothing here reads a file (a column slice may fetch rows of a remote column).
"""
from __future__ import annotations

import json
import reprlib
from functools import partial

import numpy as np

from corgi_io.formats import FORMATS
from corgi_io.manifest.checksum import CHECKSUMS
from corgi_io.manifest.field_checks import check_field_count, check_field_rows
from corgi_io.manifest.fields import KINDS
from corgi_io.manifest.limits import MAX_FIELDS, MAX_ROWS, MAX_VALUE
from corgi_io.errors import ManifestError
from corgi_io.manifest.names import shard_path_problem
from corgi_io.manifest.schema import FIELD_RANGES_SINCE, MAX_SKIP_REASONS, ROWS_SINCE, SKIPS_SINCE

READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
SHORT = reprlib.Repr()  # bounded repr for messages: a 900-deep list or a 10**400 stays one short line
SHORT.maxlevel, SHORT.maxstring, SHORT.maxother, SHORT.maxlong = 3, 60, 40, 40


def _fail(where: str, message: str):
    raise ManifestError(f"{where}: {message}")


def _is_integer(value) -> bool:
    """True for a JSON integer: not a bool, not a float that happens to be whole (2.0)."""
    return type(value) is int


def _integer(value, where: str, name: str, least: int = 0, most: int = MAX_VALUE) -> int:
    if not _is_integer(value) or not least <= value <= most:
        _fail(where, f"{name} must be an integer in [{least}, {most}], not {SHORT.repr(value)}")
    return value


def _is_text(value) -> bool:
    """True for a str that encodes as UTF-8 (JSON can smuggle in lone surrogates, e.g. "\\ud800")."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _list_of(value, kind, where: str, name: str) -> list:
    valid = _is_text if kind is str else (lambda item: isinstance(item, kind))
    if not isinstance(value, list) or not all(valid(item) for item in value):
        _fail(where, f"{name} must be a list of {'UTF-8 strings' if kind is str else kind.__name__}")
    return value


def parse_head(raw: bytes, where: str) -> dict:
    """The typed fields of a manifest head, or ManifestError naming `where` and the first bad field."""
    try:
        head = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        _fail(where, f"not valid JSON ({str(exc)[:80]})")
    if not isinstance(head, dict):
        _fail(where, "the head is not a JSON object")
    version = head.get("corgi_manifest_version")
    if not _is_integer(version) or version not in READABLE_VERSIONS:
        _fail(where, f"manifest version {SHORT.repr(version)}; this corgi-io reads versions {READABLE_VERSIONS}")
    fields = ("format", "options", "labels", "shards", "skipped") + (("columns",) if version == 1 else ("checksum", "extensions", "counts"))
    missing = [name for name in fields if name not in head]
    if missing:
        _fail(where, f"missing field {missing[0]!r}")
    if not isinstance(head["format"], str) or head["format"] not in FORMATS:
        _fail(where, f"unknown shard format {SHORT.repr(head['format'])}")
    if not isinstance(head["options"], dict):
        _fail(where, "options must be an object")
    parsed = {"version": version, "format": head["format"], "options": head["options"],
              "labels": _list_of(head["labels"], str, where, "labels"),
              "skipped": (_parse_skip_summary(head["skipped"], where) if version >= SKIPS_SINCE
                          else _parse_skip_list(head["skipped"], where)),
              "shards": _parse_shards(head["shards"], where)}
    parsed.update(_parse_v1_fields(head, where) if version == 1 else _parse_v2_fields(head, where))
    parsed.update(_parse_fields(head, where) if version >= 3 else {"fields": parsed["extensions"], "max_fields": 1})
    if version >= FIELD_RANGES_SINCE:
        check_field_count(parsed["counts"], parsed["max_fields"], partial(_fail, where))
    return parsed


def _parse_skip_list(records, where: str) -> list:
    """The skip records a head listed before version 4, each checked (and given as listed, no copy made)."""
    for i, record in enumerate(_list_of(records, dict, where, "skipped")):
        check_skip_record(record, f"{where}: skipped[{i}]")
    return records


def check_skip_record(record, where: str) -> dict:
    """A skip record ({"path", "reason"}, UTF-8 strings; other keys dropped), or ManifestError naming `where`."""
    if not isinstance(record, dict) or not _is_text(record.get("path")) or not _is_text(record.get("reason")):
        _fail(where, f"a skip record must be an object with a string path and reason, not {SHORT.repr(record)}")
    return {"path": record["path"], "reason": record["reason"]}


def _parse_skip_summary(summary, where: str) -> dict:
    """A version-4 head's summary of the skip records: their count, the skip file's bytes and at most
    MAX_SKIP_REASONS reasons with their counts (each in [1, count], adding up to at most count)."""
    if not isinstance(summary, dict):
        _fail(where, "skipped must be an object of count, bytes and reasons")
    count = _integer(summary.get("count"), where, "skipped.count", most=MAX_ROWS)
    size = _integer(summary.get("bytes"), where, "skipped.bytes")
    reasons = summary.get("reasons")
    if not isinstance(reasons, dict) or len(reasons) > MAX_SKIP_REASONS or not all(map(_is_text, reasons)):
        _fail(where, f"skipped.reasons must be an object of at most {MAX_SKIP_REASONS} reasons")
    for reason, n in reasons.items():
        _integer(n, where, f"skipped.reasons[{SHORT.repr(reason)}]", 1, count)
    if sum(reasons.values()) > count or (count == 0) != (size == 0):
        _fail(where, f"skipped counts {count} records in {size} bytes, of which {sum(reasons.values())} by reason")
    return {"count": count, "bytes": size, "reasons": reasons}


def _parse_fields(head: dict, where: str) -> dict:
    """A version-3 head's field names (distinct, 1 to 64 of them) and the most fields one sample holds."""
    fields = _list_of(head.get("fields"), str, where, "fields")
    if not 1 <= len(fields) <= MAX_FIELDS or len(set(fields)) != len(fields):
        _fail(where, f"fields must list between 1 and {MAX_FIELDS} distinct names")
    return {"fields": fields, "max_fields": _integer(head.get("max_fields"), where, "max_fields", 1, len(fields))}


def _parse_v1_fields(head: dict, where: str) -> dict:
    columns = head["columns"]
    if not isinstance(columns, dict):
        _fail(where, "columns must be an object")
    return {"checksum": "crc32", "extensions": [""], "columns_bytes": _integer(columns.get("bytes"), where, "columns.bytes")}


def _parse_v2_fields(head: dict, where: str) -> dict:
    if not isinstance(head["checksum"], str) or head["checksum"] not in CHECKSUMS:
        _fail(where, f"unknown checksum {SHORT.repr(head['checksum'])}; known: {sorted(CHECKSUMS)}")
    extensions = _list_of(head["extensions"], str, where, "extensions")
    if not extensions or len(extensions) > 1 << 16:
        _fail(where, "extensions must list between 1 and 65536 extensions")
    counts = head["counts"]
    if not isinstance(counts, dict):
        _fail(where, "counts must be an object")
    version = head["corgi_manifest_version"]
    names = (("samples", "blocks", "key_bytes") + (("rows_bytes",) if version >= ROWS_SINCE else ())
             + (("fields",) if version >= FIELD_RANGES_SINCE else ()))
    counts = {name: _integer(counts.get(name), where, f"counts.{name}", most=MAX_VALUE if name == "rows_bytes"
                             else MAX_ROWS) for name in names}
    return {"checksum": head["checksum"], "extensions": extensions, "counts": counts}


def _parse_shards(shards, where: str) -> tuple:
    """The shards as columns: (paths, bytes, first samples, samples), with safe, distinct relative paths."""
    if not isinstance(shards, list):
        _fail(where, "shards must be a list")
    columns, seen = ([], [], [], []), set()
    for i, shard in enumerate(shards):
        if not isinstance(shard, dict) or not isinstance(shard.get("path"), str):
            _fail(where, f"shard {i} must be an object with a string path")
        path = shard["path"]
        reason = shard_path_problem(path)
        if reason or path in seen:
            _fail(where, f"shard {i} path {SHORT.repr(path)} {reason or 'is listed twice'}: "
                         "it must be a relative path inside the pack")
        seen.add(path)
        for column, value in zip(columns, (path, *(_integer(shard.get(name), where, f"shard {i} {name}")
                                                   for name in ("bytes", "first_sample", "samples")))):
            column.append(value)
    return columns


def check_tables(m, where: str) -> None:
    """The checks that cost O(blocks + shards): run by `open_manifest` on every pack it opens."""
    fail = partial(_fail, where)
    _check_lengths(m, fail)
    shard_first, shard_count, _ = _shard_table(m)
    if not _tiles(shard_first, shard_count, m.num_samples):
        fail("shard sample ranges do not tile the samples")
    _check_block_table(m, fail)


def _check_lengths(m, fail) -> None:
    """One row per sample in every sample column, equal block columns (version 1 has no declared counts)."""
    offsets, n = m.key_offsets, m.num_samples
    if len(offsets) == 0 or (n == 0 and (int(offsets[0]) != 0 or len(m.key_blob))):
        fail("key offsets do not index the key blob")
    for name, column in m.samples.arrays.items():
        if len(column) != n:
            fail(f"column sample_{name!s} has {len(column)} rows but there are {n} keys")
    if m.field_start is not None and (len(m.field_start) != n + 1 or len({*map(len, m.field_rows.arrays.values())}) > 1):
        fail(f"column field_start has {len(m.field_start)} rows for {n} samples, or the field columns differ in length")
    if len({len(column) for column in m.blocks.arrays.values()}) > 1:
        fail("block columns differ in length")


def _shard_table(m) -> tuple:
    """(first sample, samples, bytes) of every shard, as int64 arrays."""
    return m.shards.first_sample, m.shards.samples, m.shards.bytes


def _tiles(first: np.ndarray, counts: np.ndarray, total: int) -> bool:
    """True when runs of `counts` items starting at `first` lie end to end from 0 to `total`."""
    if len(first) == 0:
        return total == 0
    ends = np.cumsum(counts)
    return bool(first[0] == 0 and ends[-1] == total and np.array_equal(first[1:], ends[:-1]))


def _check_block_table(m, fail) -> None:
    """Block columns in range, tiling the samples, each block inside its shard's samples and bytes (O(blocks))."""
    b = m.blocks
    for name, column in b.arrays.items():
        if len(column) and (column.min() < 0 or column.max() > MAX_VALUE):
            fail(f"block {name} outside [0, {MAX_VALUE}]")
    if np.any(b.count <= 0) or not _tiles(b.first, b.count, m.num_samples):
        fail("block sample ranges do not tile the samples")
    if len(b.first) == 0:
        return
    if b.shard.max() >= len(m.shards):
        fail(f"block shard outside [0, {len(m.shards) - 1}]")
    shard_first, shard_count, shard_bytes = _shard_table(m)
    if (np.any(b.first < shard_first[b.shard])
            or np.any(b.first + b.count > (shard_first + shard_count)[b.shard])):
        fail("a block crosses a shard boundary")
    bad = np.flatnonzero(b.offset + b.length > shard_bytes[b.shard])
    if len(bad):
        i, shard = int(bad[0]), int(b.shard[bad[0]])
        fail(f"block {i} spans bytes {b.offset[i]}..{b.offset[i] + b.length[i]} but shard {m.shards[shard].path} "
             f"has {shard_bytes[shard]} bytes")
    if float(np.sum(b.size_sum, dtype=np.float64)) > MAX_VALUE:  # schedules add sizes up in int64
        fail(f"sample sizes add up to more than {MAX_VALUE}")


def check_block_rows(m, lo: int, hi: int, where: str) -> None:
    """Check the per-sample rows of blocks [lo, hi) against each other and against the block table."""
    fail = partial(_fail, where)
    b = m.blocks
    start, stop = int(b.first[lo]), int(b.first[hi - 1] + b.count[hi - 1])
    _check_keys(m, lo, hi, start, stop, fail)  # first: later messages quote keys
    rows = {name: np.asarray(column[start:stop]) for name, column in m.samples.arrays.items()}
    _check_values(m, rows, start, fail)
    stray = np.flatnonzero(rows["shard"] != np.repeat(b.shard[lo:hi], b.count[lo:hi]))
    if len(stray):
        fail(f"sample {start + int(stray[0])}: its shard id disagrees with the shard sample ranges")
    _check_records(m, rows, lo, hi, start, fail)
    if m.field_start is not None:
        check_field_rows(m, rows, start, fail, partial(_key, m))
    first = b.first[lo:hi] - start
    sizes = rows["size"]
    if (np.any(np.add.reduceat(sizes, first, dtype=np.float64) > MAX_VALUE)
            or np.any(np.add.reduceat(sizes, first) != b.size_sum[lo:hi])):
        fail("block size sums disagree with sample sizes")


def _check_keys(m, lo: int, hi: int, start: int, stop: int, fail) -> None:
    """The keys of rows [start, stop): offsets inside the blob and ascending, boundaries on characters, UTF-8."""
    offsets, blob_bytes = np.asarray(m.key_offsets[start:stop + 1]), len(m.key_blob)
    if (offsets[0] < 0 or offsets[-1] > blob_bytes or np.any(np.diff(offsets) < 0)
            or (lo == 0 and offsets[0] != 0) or (hi == len(m.blocks.first) and offsets[-1] != blob_bytes)):
        fail("key offsets do not index the key blob")
    blob = np.asarray(m.key_blob[int(offsets[0]):int(offsets[-1])])
    inner = offsets[:-1] - offsets[0]
    if np.any((blob[inner[inner < len(blob)]] & 0xC0) == 0x80):
        fail("a key boundary splits a UTF-8 character")
    try:
        blob.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"keys are not valid UTF-8 (key byte {int(offsets[0]) + exc.start})")


def _key(m, index: int) -> str:
    """The key of a row whose keys are checked, for messages (bounded)."""
    text = m.key_blob[int(m.key_offsets[index]):int(m.key_offsets[index + 1])].tobytes().decode("utf-8")
    return SHORT.repr(text)


def _check_values(m, rows: dict, start: int, fail) -> None:
    """Every number of rows in its range: indexes inside their tables, byte counts and sizes in [0, MAX_VALUE]."""
    limits = [("label", -1, len(m.labels) - 1), ("kind", 0, len(KINDS) - 1), ("ext", 0, len(m.extensions) - 1),
              ("shard", 0, len(m.shards) - 1)]
    limits += [(name, 0, MAX_VALUE) for name in ("bytes", "size", "offset", "length", "data_offset")]
    for name, least, most in limits:
        column = rows[name]
        if len(column) and (column.min() < least or column.max() > most):
            bad = int(np.flatnonzero((column < least) | (column > most))[0])
            fail(f"sample {name} outside [{least}, {most}] (e.g. {int(column[bad])} at sample {start + bad})")
    if "fields" in rows:
        _check_fields(m, rows, start, fail)


def _check_fields(m, rows: dict, start: int, fail) -> None:
    """Field masks name only the head's fields, at most `max_fields` of them, the primary field (`ext`) among them."""
    masks = rows["fields"].astype(np.uint64)
    position = {name: i for i, name in enumerate(m.fields)}
    ext_bit = np.array([position.get(name, MAX_FIELDS) for name in m.extensions], dtype=np.uint64)
    primary = np.left_shift(np.uint64(1), np.minimum(ext_bit[rows["ext"]], 63)) * (ext_bit[rows["ext"]] < MAX_FIELDS)
    beyond = masks >> np.uint64(len(m.fields)) if len(m.fields) < MAX_FIELDS else np.zeros_like(masks)
    bad = np.flatnonzero((beyond != 0) | (np.bitwise_count(masks) > m.max_fields) | ((masks & primary) == 0))
    if len(bad):
        fail(f"sample {start + int(bad[0])} ({_key(m, start + int(bad[0]))}): its field mask {int(masks[bad[0]]):#x} "
             f"does not fit the head's {len(m.fields)} fields, max_fields {m.max_fields} and its extension")


def _check_records(m, rows: dict, lo: int, hi: int, start: int, fail) -> None:
    """Records inside their shard, back to back from their block's start to its end; payloads inside records."""
    b = m.blocks
    offset, length = rows["offset"], rows["length"]
    end = offset + length
    shard_bytes = _shard_table(m)[2]
    bad = np.flatnonzero((length <= 0) | (end > shard_bytes[rows["shard"]]))
    if len(bad):
        i, shard = int(bad[0]), int(rows["shard"][bad[0]])
        fail(f"sample {start + i} ({_key(m, start + i)}) spans bytes {offset[i]}..{end[i]} but shard "
             f"{m.shards[shard].path} has {shard_bytes[shard]} bytes")
    bad = np.flatnonzero((rows["data_offset"] < offset) | (rows["data_offset"] + rows["bytes"] > end))
    if len(bad):
        fail(f"sample {start + int(bad[0])} ({_key(m, start + int(bad[0]))}): payload lies outside its record")
    first, last = b.first[lo:hi] - start, b.first[lo:hi] + b.count[lo:hi] - 1 - start
    if np.any(offset[first] != b.offset[lo:hi]) or np.any(end[last] != b.offset[lo:hi] + b.length[lo:hi]):
        fail("block byte ranges disagree with their samples")
    inner = np.ones(len(offset), dtype=bool)
    inner[first] = False  # inside a block each record starts where the previous one ended
    if np.any(offset[1:][inner[1:]] != end[:-1][inner[1:]]):
        fail("samples inside a block are not contiguous")


def validate(m, where: str) -> None:
    """Every check on every row: the tables, then all blocks (what `Manifest.validate_rows()` does, uncached)."""
    check_tables(m, where)
    if len(m.blocks.first):
        check_block_rows(m, 0, len(m.blocks.first), where)

"""Skip records: the inputs a pack did not pack, kept beside the head so that opening a pack costs the same
whatever their number.

From version 4, ``columns/skipped.jsonl`` holds one ``{"path", "reason"}`` JSON object a line, in the order
the pack met them, and the head only their summary: ``"skipped": {"count": N, "bytes": B, "reasons": {...}}``,
the file's records and bytes and the counts of its `MAX_SKIP_REASONS` most frequent reasons (and always of
`PINNED` ones, which `corgi stats` reports); the other reasons' records are the rest of N.  Before version 4
the head listed every record under ``skipped``: such a head is summarised at open and its list dropped.

The records are read only when asked (`Manifest.skip_records`, `corgi verify`), a line at a time: a reader
holds about twice `READ_BYTES` plus `MAX_RECORD_BYTES` at most, whatever the file says, and each line, the
record count, the listed reasons' counts and the file's size are checked against the head.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from corgi_io.errors import ManifestError
from corgi_io.manifest.checks import SHORT, check_skip_record
from corgi_io.manifest.columns import checked_size
from corgi_io.manifest.schema import DUPLICATE_REASON, MAX_SKIP_REASONS, SKIPS_PATH, SKIPS_SINCE

PINNED = (DUPLICATE_REASON,)  # reasons always counted by name
MAX_TEXT = 1 << 16            # characters of a path or reason written (longer ones are clipped, marked "...")
MAX_RECORD_BYTES = 1 << 20    # the longest line a reader accepts (two clipped texts, escaped, fit in it)
READ_BYTES = 1 << 20          # bytes read at once


def head_summary(head: dict) -> dict:
    """The summary of a parsed head's skip records: its own from version 4, else that of the records it lists."""
    if head["version"] >= SKIPS_SINCE:
        return head["skipped"]
    return summarize_counts(Counter(record["reason"] for record in head["skipped"]))


def summarize_counts(counts: Counter) -> dict:
    """{"count", "reasons"} of {reason: records}: the MAX_SKIP_REASONS most frequent reasons (ties: the first seen),
    PINNED ones among them whenever they occur, most frequent first."""
    ranked = counts.most_common()
    pinned = [(reason, counts[reason]) for reason in PINNED if reason in counts]
    named = [item for item in ranked if item not in pinned][:MAX_SKIP_REASONS - len(pinned)] + pinned
    return {"count": sum(counts.values()), "reasons": dict(sorted(named, key=lambda item: -item[1]))}


def write_skip_records(root, records) -> dict:
    """Write `records` ({"path", "reason"} each, any iterable) to the pack's skip file atomically, a line each, and
    return the head's summary of what was written ({"count", "bytes", "reasons"})."""
    from corgi_io.storage.atomic import atomic_output

    path = Path(root) / SKIPS_PATH
    path.parent.mkdir(exist_ok=True)
    counts = Counter()  # of the reasons as written (clipped)
    with atomic_output(path) as f:
        for record in records:
            reason = _clip(record["reason"])
            f.write(json.dumps({"path": _clip(record["path"]), "reason": reason}, ensure_ascii=False).encode() + b"\n")
            counts[reason] += 1
        size = f.tell()
    summary = summarize_counts(counts)
    return {"count": summary["count"], "bytes": size, "reasons": summary["reasons"]}


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


def read_skip_records(storage, summary: dict, where: str):
    """The records of a version-4 pack's skip file, a line at a time, each checked; ManifestError naming `where`,
    the byte offset and the line for a bad line, and at the end for counts that disagree with the head's
    `summary` (the file's size is checked before anything is read)."""
    size = checked_size(storage, SKIPS_PATH, summary["bytes"], where)
    if size != summary["bytes"]:
        raise ManifestError(f"{where}: {size} bytes, head says {summary['bytes']}")
    seen = Counter()  # records in all, and of each reason the head names
    for number, (offset, line) in enumerate(_lines(storage, size, where), 1):
        record = _parse_line(line, f"{where}: byte offset {offset}: line {number}")
        seen[None] += 1
        if record["reason"] in summary["reasons"]:
            seen[record["reason"]] += 1
        yield record
    if seen[None] != summary["count"]:
        raise ManifestError(f"{where}: holds {seen[None]} records, head says {summary['count']}")
    for reason, count in summary["reasons"].items():
        if seen[reason] != count:
            raise ManifestError(f"{where}: holds {seen[reason]} records of reason {SHORT.repr(reason)}, "
                                f"head says {count}")


def _parse_line(line: bytes, where: str) -> dict:
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(f"{where}: not a JSON record ({str(exc)[:80]})") from None
    return check_skip_record(record, where)


def _lines(storage, size: int, where: str):
    """(byte offset, line without its newline) of each line of the skip file, read READ_BYTES at a time; a line
    longer than MAX_RECORD_BYTES, or a last one without its newline (a cut file), is a ManifestError."""
    pending, start = b"", 0
    for offset in range(0, size, READ_BYTES):
        lines = (pending + storage.read_range(SKIPS_PATH, offset, min(READ_BYTES, size - offset))).split(b"\n")
        pending = lines.pop()
        for line in lines:
            _check_length(line, start, where)
            yield start, line
            start += len(line) + 1
        _check_length(pending, start, where)
    if pending:
        raise ManifestError(f"{where}: byte offset {start}: the last line has no newline "
                            f"({SHORT.repr(pending[:40])}): the file is cut short")


def _check_length(line: bytes, offset: int, where: str) -> None:
    if len(line) > MAX_RECORD_BYTES:
        raise ManifestError(f"{where}: byte offset {offset}: a line longer than {MAX_RECORD_BYTES} bytes")

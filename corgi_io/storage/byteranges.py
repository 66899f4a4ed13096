"""HTTP multi-range answers: the `Range` header asking for several byte ranges at once, and the
`multipart/byteranges` body (RFC 9110 §14.6) that answers it, parsed without trusting the server.

Why: a rank reads the metadata of blocks all over a pack (`columns/rows.bin`, one row group per block);
one GET that names every range costs one request and one round trip, where a GET per range costs one each.
Each part must carry a `Content-Range` inside the file, and its data is taken by that length (never by
searching for the boundary in the data); every range asked for must be covered by a part, else
StorageError naming the URL and the first uncovered offset.  The caller bounds the body's size.
"""
from __future__ import annotations

import re

from corgi_io.errors import StorageError

MAX_RANGES = 100      # ranges in one request: about 2.5 KB of header, inside every server's header limit
PART_OVERHEAD = 256   # bytes a part's boundary and headers may add to its data, for the body's bound
_BOUNDARY = re.compile(r'boundary="?([0-9A-Za-z\'()+_,./:=?-]{1,70})"?')
_PART_RANGE = re.compile(rb"content-range:\s*bytes (\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


def range_header(ranges: list) -> str:
    """The Range header value that asks for every (offset, length) of `ranges` (each length >= 1)."""
    return "bytes=" + ",".join(f"{offset}-{offset + length - 1}" for offset, length in ranges)


def body_bound(ranges: list) -> int:
    """The most bytes an honest multipart answer to `ranges` can take."""
    return sum(length for _, length in ranges) + PART_OVERHEAD * (len(ranges) + 1)


def parse_parts(url: str, content_type: str, body: bytes) -> list:
    """[(start, data)] of a multipart/byteranges body; StorageError naming `url` if it is malformed."""
    found = _BOUNDARY.search(content_type or "")
    if not content_type.lower().startswith("multipart/byteranges") or not found:
        raise StorageError(f"{url}: a multi-range answer that is not multipart/byteranges ({content_type!r})")
    delimiter, parts, at = b"--" + found[1].encode("ascii"), [], 0
    while True:
        at = body.find(delimiter, at)
        if at < 0 or body.startswith(b"--", at + len(delimiter)):
            return parts
        head_end = body.find(b"\r\n\r\n", at)
        got = _PART_RANGE.search(body, at, head_end) if head_end > 0 else None
        if got is None:
            raise StorageError(f"{url}: a multi-range part without a Content-Range at body byte {at}")
        start, stop = int(got[1]), int(got[2]) + 1
        data = body[head_end + 4:head_end + 4 + stop - start]
        if stop <= start or len(data) != stop - start:
            raise StorageError(f"{url}: multi-range part bytes {start}-{stop - 1} cut short at body byte {at}")
        parts.append((start, data))
        at = head_end + 4 + len(data)


def covers(parts: list, ranges: list) -> bool:
    """Whether every asked (offset, length) lies inside one of the [(start, data)] parts."""
    return all(any(start <= offset and offset + length <= start + len(data) for start, data in parts)
               for offset, length in ranges)


def cut_ranges(url: str, parts: list, ranges: list) -> list:
    """The bytes of each asked (offset, length), cut from the parts that cover it (a server may merge ranges)."""
    out = []
    for offset, length in ranges:
        part = next((data[offset - start:offset - start + length] for start, data in parts
                     if start <= offset and offset + length <= start + len(data)), None)
        if part is None:
            raise StorageError(f"{url}: the multi-range answer does not cover offset {offset} ({length} bytes)")
        out.append(part)
    return out

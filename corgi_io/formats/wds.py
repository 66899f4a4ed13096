"""WebDataset tar shards: POSIX tar (pax where names need it) with webdataset member naming.

A sample is one member per field, contiguous: ``<key>.<ext>`` holding the primary field (the original
file bytes, unchanged), then ``<key>.<field>`` for each other field, then ``<key>.cls`` holding the
class id as ASCII digits (omitted for unlabeled samples).
`webdataset.WebDataset(urls)` groups consecutive members by key, so stock readers see
exactly our samples.  Headers come from the standard library's `tarfile`.
"""
from __future__ import annotations

import io
import tarfile

from corgi_io.errors import FormatError
from corgi_io.formats import FieldSpan, Record

SUFFIX = ".tar"
BLOCK = tarfile.BLOCKSIZE
TRAILER = b"\0" * (2 * BLOCK)  # end-of-archive marker


_USTAR_TEMPLATE = (b"\0" * 100 + b"0000644\0" + b"0000000\0" * 2 + b"\0" * 12 + b"00000000000\0"
                   + b" " * 8 + b"0" + b"\0" * 100 + tarfile.POSIX_MAGIC + b"\0" * 247)
_USTAR_TEMPLATE_SUM = sum(_USTAR_TEMPLATE)  # the checksum counts its own field as spaces, as here
_ZERO_SIZE_SUM = sum(_USTAR_TEMPLATE[124:136])


def _padded(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def _header(name: str, size: int) -> bytes:
    """A tar header for a regular file (mode 0644, mtime 0 so packs are reproducible).

    Plain ustar headers are built here directly: tarfile's general header code cost
    ~30 us per member, a third of the whole pack (profiled in bench/pack.py), and
    tests check that the bytes equal tarfile's own USTAR output.  Names that ustar
    cannot hold go through tarfile's pax headers.
    """
    encoded = name.encode("utf-8")
    if len(encoded) > 100 or size >= 8 ** 11:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o644, 0
        return info.tobuf(tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")
    header = bytearray(_USTAR_TEMPLATE)
    header[0:len(encoded)] = encoded
    size_field = b"%011o\0" % size
    header[124:136] = size_field
    header[148:156] = b"%06o\0 " % (_USTAR_TEMPLATE_SUM + sum(encoded) + sum(size_field) - _ZERO_SIZE_SUM)
    return bytes(header)


def encode(key: str, ext: str, data: bytes, label: int, size: int, extra=()):
    """Tar members for one sample, the primary field first, then `extra` ((name, bytes) pairs), then the label:
    (list of byte strings, a FieldSpan per field relative to the record: its member's header and payload)."""
    parts, spans, at = [], [], 0
    for name, value in ((ext, data), *extra):
        header, nbytes = _header(f"{key}.{name}", len(value)), len(value)
        padding = -nbytes % BLOCK
        parts += (header, value, b"\0" * padding)
        spans.append(FieldSpan(name, at, at + len(header), nbytes))
        at += len(header) + nbytes + padding
    if label >= 0:
        digits = str(label).encode()
        parts += [_header(f"{key}.cls", len(digits)), digits, b"\0" * (BLOCK - len(digits))]
    return parts, tuple(spans)


def estimate_record_bytes(nbytes, key_bytes, fields=1):
    """Record size from payload and key lengths (exact for labeled one-field samples with names up to 100 bytes).

    Longer names get a pax header per member: a header block plus the padded
    "NN path=<name>\n" record (with generous room for the extension and length digits).
    Each field beyond the first adds a header and, at most, a block of padding.
    """
    pax = (key_bytes + 8 > 100) * 2 * (BLOCK + _padded(key_bytes + 32))
    return BLOCK + _padded(nbytes) + 2 * BLOCK + pax + (fields - 1) * (2 * BLOCK + pax // 2)


def write_sidecars(shard_path, offsets, lengths) -> list:
    """WebDataset needs nothing beside a tar shard."""
    return []


def parse_block(buffer, base_offset: int = 0):
    """Parse whole samples from the bytes of one block (or a whole shard) with `tarfile`.

    Consecutive members of one key are one sample: its first member is the primary field (`data`),
    every member but ``.cls`` a field (with its FieldSpan: the member's header offset, a pax header's if it has
    one, and its payload), and ``.cls`` its label.  Raises FormatError naming the
    absolute offset where the bytes stop being valid tar.
    """
    buffer = memoryview(buffer)
    pending = None  # [key, record start, fields, primary data offset, label, spans]
    end = 0
    try:
        for member in tarfile.open(fileobj=io.BytesIO(buffer), mode="r:", encoding="utf-8"):
            if not member.isfile():
                raise FormatError(base_offset + member.offset, f"tar member {member.name!r} is not a regular file")
            key, ext = split_name(member.name)
            data = bytes(buffer[member.offset_data: member.offset_data + member.size])
            if len(data) != member.size:
                raise FormatError(base_offset + member.offset_data, f"tar member {member.name!r} is truncated")
            if pending and (pending[0] != key or pending[4] >= 0):
                yield _record(pending, member.offset, base_offset)
                pending = None
            end = member.offset_data + _padded(member.size)
            if pending is None:
                pending = [key, member.offset, [], member.offset_data, -1, []]
            if ext == "cls" and pending[2]:
                pending[4] = int(data)
            else:
                pending[2].append((ext, data))
                pending[5].append(FieldSpan(ext, base_offset + member.offset, base_offset + member.offset_data,
                                            member.size))
        if pending:
            yield _record(pending, end, base_offset)
    except tarfile.TarError as exc:
        raise FormatError(base_offset + end, f"bad tar header ({exc})") from None
    if end < len(buffer) and any(buffer[end:].tobytes()):
        # tarfile stops quietly at a damaged header after the first; trailing bytes must be zeros
        raise FormatError(base_offset + end, "bytes after the last valid tar member do not parse")


def split_name(name: str) -> tuple:
    """(key, field) of a member name: webdataset splits at the first dot of the base name."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    return (name[:dot], name[dot + 1:]) if dot > slash else (name, "")


def _record(pending, end: int, base_offset: int) -> Record:
    key, start, fields, data_offset, label, spans = pending
    return Record(key, fields[0][1], label, base_offset + start, end - start, base_offset + data_offset, tuple(fields),
                  tuple(spans))

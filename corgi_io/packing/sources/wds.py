"""WebDataset tar files (plain or gzip) as a SOURCE: members grouped into samples as webdataset does.

Grouping is webdataset's `base_plus_ext` rule: a member's key is its path up to the first dot of
its base name, its field the rest, lower-cased; consecutive members with one key form one
sample.  The label is the `cls` field (an integer as text), or the field named by `label_field`;
either is taken out of the fields, and a sample without it is unlabeled (-1).

The tar is untrusted.  Nothing is extracted or followed: a member is only ever read into memory.
Skipped with a warning naming the file and member (BadInput under `strict`): links (symbolic or
hard), devices, FIFOs and other non-regular members; names with a '..' or empty component or a
leading '/' (the key rule of `manifest.names`); field names that fail `check_field_name`; a
member above `max_member_bytes`; a duplicate field; and a field with a ``pyd``, ``pickle``, ``pkl``
or ``pth`` part (``x.pyd``, ``pyd.gz``), which is refused rather than kept: a stock webdataset
reader unpickles such fields (torch.load for ``pth``, after gunzipping a ``.gz``), so packing them
would hand arbitrary code to every consumer of the pack.  No field is ever decoded here.  A member
whose size runs past the end of the file, or a header that does not parse, ends the file there (a
size that cannot be trusted cannot be skipped over).  Directories are not samples and pass silently.

Memory: tarfile reads headers only (members are read by us, one sample at a time, each at most
`max_member_bytes`); the member list tarfile keeps is cleared as we go, and a file object guard
refuses any single read above the limit, which bounds pax and GNU long-name headers too.
"""
from __future__ import annotations

import gzip
import re
import tarfile

from corgi_io.errors import BadInput
from corgi_io.manifest.fields import check_field_name
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit
from corgi_io.packing.sources.values import check_label, checked_key, open_binary, skip_or_raise

SUFFIXES = (".tar", ".tar.gz", ".tgz")
MAX_MEMBER_BYTES = 1 << 30
REFUSED_FIELDS = ("pyd", "pickle", "pkl", "pth")  # extensions a stock webdataset reader would unpickle
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset.tariterators.base_plus_ext
_GZIP_MAGIC = b"\x1f\x8b"
_END = object()  # what `_Tar.accepted` gives for a member whose data stops short: the file ends there


def units(path: str):
    """One unit: the whole tar file (a tar stream cannot be split without reading it)."""
    return [Unit("wds", path)]


def read(unit: Unit, *, strict: bool = False, on_skip=None, label_field: str = "cls",
         max_member_bytes: int = MAX_MEMBER_BYTES):
    """The samples of one tar file, in file order (see the module docstring for what is skipped)."""
    with open_binary(unit.path) as raw:
        yield from _samples(_Tar(unit.path, raw, max_member_bytes, strict, on_skip), label_field)


def _samples(tar: _Tar, label_field: str):
    """Group the tar's (key, field, bytes) members into PackSamples, one sample in memory at a time."""
    key, fields = None, {}
    for member_key, field, data in tar.members():
        if member_key != key:
            if fields:
                yield from tar.sample(key, fields, label_field)
            key, fields = member_key, {}
        if field in fields:
            tar.bad(f"{member_key}.{field}", f"repeats field '{field}' of sample '{key}'")
            continue
        fields[field] = data
    if fields:
        yield from tar.sample(key, fields, label_field)


class _Tar:
    """One tar file read member by member, with the file name and policy every message needs."""

    def __init__(self, path: str, raw, max_member_bytes: int, strict: bool, on_skip):
        """Over the open file `raw` (gunzipped when its first bytes say gzip), behind a `_Guard`."""
        self.path, self.strict, self.on_skip = path, strict, on_skip
        self.max_member_bytes = max_member_bytes
        head = raw.read(2)
        raw.seek(0)
        compressed = head == _GZIP_MAGIC
        self.size = None if compressed else raw.seek(0, 2)  # a gzip's tar size is known only at its end
        self.file = _Guard(gzip.GzipFile(fileobj=raw) if compressed else raw, max_member_bytes + 2 * tarfile.BLOCKSIZE)

    def bad(self, member: str, reason: str) -> None:
        """A member (or sample) that is not packed: warned, or BadInput under strict."""
        skip_or_raise(f"{self.path}: member {member!r}: {reason}", self.strict, self.on_skip)

    def members(self):
        """(key, field, bytes) of each acceptable regular member, in order; bad ones reported and skipped."""
        self.file.seek(0)
        try:
            tar = tarfile.TarFile(fileobj=self.file, mode="r", encoding="utf-8", errors="surrogateescape")
        except (tarfile.TarError, EOFError, OSError) as exc:
            skip_or_raise(f"{self.path}: byte offset 0: not a tar file ({exc})", self.strict, self.on_skip)
            return
        offset = 0
        while True:
            try:
                member = tar.next()
            except (tarfile.TarError, EOFError, OSError, _TooLarge) as exc:
                skip_or_raise(f"{self.path}: byte offset {offset}: bad tar header ({exc}); the rest of the "
                              f"file is not read", self.strict, self.on_skip)
                return
            if member is None:
                return self.check_end(tar.offset)
            tar.members.clear()  # tarfile keeps every header it read; we need none of them
            offset = member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
            if self.past_end(member):
                return
            item = self.accepted(member)
            if item is _END:
                return
            if item is not None:
                yield item

    def past_end(self, member) -> bool:
        """True (reported) when `member`'s data would run past the end of the file."""
        if self.size is None or member.offset_data + member.size <= self.size:
            return False
        self.bad(member.name, f"declares {member.size} bytes at byte offset {member.offset_data}, past the end "
                 f"of the file ({self.size} bytes); the rest of the file is not read")
        return True

    def accepted(self, member):
        """(key, field, bytes) of a member that may be packed; None (reported unless a folder) otherwise;
        _END (reported) when its data stops short: a gzip's tar size is known only at its end."""
        if member.isdir():
            return None
        problem = self.problem(member)
        if problem is not None:
            return self.bad(member.name, problem)
        key, field = _key_and_field(member.name)
        self.file.seek(member.offset_data)
        data = self.file.read(member.size)
        if len(data) != member.size:
            self.bad(member.name, f"truncated: {len(data)} of {member.size} bytes at byte offset "
                     f"{member.offset_data}; the rest of the file is not read")
            return _END
        return key, field, data

    def problem(self, member) -> str | None:
        """Why `member` cannot be packed, or None."""
        if not member.isreg():
            return f"is a {_KINDS.get(member.type, 'non-regular member')}, not a regular file (not followed)"
        key, field = _key_and_field(member.name)
        if key is None:
            return "has no extension to name a field"
        try:
            checked_key(key)
            check_field_name(field)
        except BadInput as exc:
            return str(exc)
        if any(part in REFUSED_FIELDS for part in field.split(".")):  # ``pyd.gz`` too: gunzipped, then unpickled
            return f"field '{field}' is a pickle, which is never packed"
        if member.size > self.max_member_bytes:
            return f"{member.size} bytes, above max_member_bytes={self.max_member_bytes}"
        return None

    def check_end(self, end: int) -> None:
        """Report bytes after the last header that are not zeros (a damaged header tarfile stopped at).

        tarfile's last read was the block at `end`; it is looked at again from memory, since seeking a
        gzip stream back would decompress it again from its start.
        """
        start, chunk = self.file.last
        if start != end:
            self.file.seek(end)
            chunk = b""
        while True:
            if chunk.strip(b"\0"):
                return skip_or_raise(f"{self.path}: byte offset {end}: bytes after the last valid tar member do "
                                     f"not parse; the rest of the file is not read", self.strict, self.on_skip)
            chunk = self.file.read(min(1 << 16, self.file.limit))
            if not chunk:
                return

    def sample(self, key: str, fields: dict, label_field: str):
        """The PackSample of one group of members (0 or 1 of them): its label taken out of its fields."""
        text = fields.pop(label_field, None)
        try:
            label = -1 if text is None else check_label(text)
            yield PackSample(key, label, fields)
        except BadInput as exc:
            self.bad(f"{key}.{label_field}" if text is not None else key, str(exc))


def _key_and_field(name: str):
    """(key, lower-case field) of a member name by webdataset's rule; (None, None) without an extension."""
    match = _BASE_PLUS_EXT.match(name)
    return (match.group(1), match.group(2).lower()) if match else (None, None)


_KINDS = {tarfile.SYMTYPE: "symbolic link", tarfile.LNKTYPE: "hard link", tarfile.CHRTYPE: "character device",
          tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "FIFO"}


class _TooLarge(Exception):
    """A single read above the guard's limit: a header that declares more than any member may hold."""


class _Guard:
    """A seekable file object that refuses one read above `limit` bytes (pax and long-name headers
    included, which tarfile reads whole)."""

    def __init__(self, file, limit: int):
        """Over the seekable `file`; `last` remembers the last read for `_Tar.check_end`."""
        self.file, self.limit = file, limit
        self.last = (-1, b"")  # (where, bytes) of the last read

    def read(self, size: int = -1) -> bytes:
        """At most `size` bytes; `_TooLarge` for a read of everything or above the limit."""
        if size is None or size < 0 or size > self.limit:
            raise _TooLarge(f"a read of {size} bytes, above the limit of {self.limit}")
        where = self.file.tell()
        data = self.file.read(size)
        self.last = (where, data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move as the wrapped file does."""
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        """Where the wrapped file is."""
        return self.file.tell()

"""Where every tar member of a WebDataset pack lies: (member name, field, data offset, size), sample by sample.

The readers' index files (DALI's ``.idx``, Energon's ``.tar.idx``) need every field's place, not only the
primary one's that the manifest's per-sample columns give.  A pack whose manifest records per-field ranges
(version 6 on: `Manifest.field_ranges`, and `label_members` for the ``.cls`` members) gives them without a read.
An older pack has its members found from the tar headers of each block: one ranged read per block, as the loader
reads it (a window of at most WINDOW bytes: a larger block, one huge video say, is walked window by window,
skipping the member data, so memory stays bounded whatever a block holds).  Each member is checked against the
manifest on the way: it lies inside its sample's record, is a regular file and is named by its sample's key, and
the members tile the block; anything else is a one-line FormatError naming the shard, byte offset and key.
"""
from __future__ import annotations

import tarfile
from typing import NamedTuple

import numpy as np

from corgi_io.errors import FormatError
from corgi_io.formats.wds import split_name

WINDOW = 8 << 20  # the most bytes read at once: a whole default block (4 MiB), or a run of tar headers


class Member(NamedTuple):
    """One tar member of a sample: its name, the field it holds (what follows the key's dot) and its data's range."""

    name: str
    field: str
    offset: int  # the member's data, absolute in the shard (what DALI's wds2idx records)
    size: int


def shard_blocks(manifest, shard: int) -> range:
    """The indexes of the blocks of shard `shard` (blocks tile the samples, shards hold whole blocks)."""
    first = manifest.blocks.first
    start = int(manifest.shards.first_sample[shard])
    stop = start + int(manifest.shards.samples[shard])
    return range(int(np.searchsorted(first, start)), int(np.searchsorted(first, stop)))


def shard_samples(manifest, storage, shard: int):
    """(key, [Member, ...]) of every sample of shard `shard`, in shard order, a block at a time: from the manifest's
    per-field ranges where it has them, else from the tar headers."""
    path = manifest.shards.path(shard)
    for block in shard_blocks(manifest, shard):
        if has_field_ranges(manifest):
            yield from recorded_samples(manifest, block)
        else:
            yield from block_samples(manifest, storage, path, block)


def has_field_ranges(manifest) -> bool:
    """Whether the manifest records each field's place (version 6 on): the seam the tests use to walk headers."""
    return manifest.has_field_ranges


def recorded_samples(manifest, block: int) -> list:
    """(key, [Member, ...]) of each sample of block `block`, from the manifest alone: its fields in record order,
    then its ``.cls`` member when labeled."""
    first, count = int(manifest.blocks.first[block]), int(manifest.blocks.count[block])
    keys = manifest.keys(first, first + count)
    members = [[] for _ in range(count)]
    fields = manifest.field_ranges(first, first + count)
    for sample, field, offset, length in zip(*(a.tolist() for a in (fields.sample, fields.field, fields.offset,
                                                                     fields.length))):
        name = manifest.fields[field]
        members[sample - first].append(Member(f"{keys[sample - first]}.{name}", name, offset, length))
    labels = manifest.label_members(first, first + count)
    for sample, offset, length in zip(*(a.tolist() for a in (labels.sample, labels.offset, labels.length))):
        members[sample - first].append(Member(f"{keys[sample - first]}.cls", "cls", offset, length))
    return list(zip(keys, members))


def block_samples(manifest, storage, path: str, block: int) -> list:
    """(key, [Member, ...]) of each sample of block `block` of shard file `path`, from its tar headers."""
    first, count = int(manifest.blocks.first[block]), int(manifest.blocks.count[block])
    keys = manifest.keys(first, first + count)  # validates the block's rows first
    starts = np.asarray(manifest.samples.offset[first:first + count]).tolist()
    lengths = np.asarray(manifest.samples.length[first:first + count]).tolist()
    base, length = int(manifest.blocks.offset[block]), int(manifest.blocks.length[block])
    samples, end = [(key, []) for key in keys], base
    i = 0
    for member in _members(storage, path, base, length):
        while i < count and member.offset >= starts[i] + lengths[i]:
            i += 1
        key = keys[min(i, count - 1)]
        if i == count or member.offset < starts[i] or member.offset_data + member.size > starts[i] + lengths[i]:
            raise FormatError(member.offset, f"{path}: tar member {member.name!r} lies outside the record of "
                                             f"sample {key!r} in the manifest")
        _check_member(member, key, path)
        samples[i][1].append(Member(member.name, split_name(member.name)[1], member.offset_data, member.size))
        end = member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    missing = next((j for j, (_, members) in enumerate(samples) if not members), None)
    if missing is not None or end != base + length:
        where, key = (starts[missing], keys[missing]) if missing is not None else (end, keys[-1])
        raise FormatError(where, f"{path}: the tar members end before the record of sample {key!r} in the manifest")
    return samples


def _check_member(member, key: str, path: str) -> None:
    """FormatError unless `member` is a regular file named `<key>.<field>`."""
    if not member.isfile():
        raise FormatError(member.offset, f"{path}: tar member {member.name!r} of sample {key!r} is not a regular file")
    if split_name(member.name)[0] != key:
        raise FormatError(member.offset, f"{path}: tar member {member.name!r} does not belong to sample {key!r} "
                                         f"of the manifest")


def _members(storage, path: str, base: int, length: int):
    """The tar members of the bytes [base, base + length) of `path`, their offsets absolute in the file."""
    window = _Window(storage, path, base, length)
    try:
        archive = tarfile.open(fileobj=window, mode="r:", encoding="utf-8", errors="strict")
        for member in archive:
            member.offset += base
            member.offset_data += base
            yield member
    except (tarfile.TarError, UnicodeError) as exc:
        raise FormatError(base + window.position, f"{path}: bad tar header ({exc})") from None


class _Window:
    """A read-only, seekable file over [base, base + length) of a shard, read WINDOW bytes at a time: what
    `tarfile` needs to walk a block's headers (it seeks over member data, so a window is read only where
    headers are).  A read of more than WINDOW bytes at once (a forged pax header) is refused."""

    def __init__(self, storage, path: str, base: int, length: int):
        self.storage, self.path, self.base, self.length = storage, path, base, length
        self.position, self.start, self.data = 0, 0, b""

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = offset if whence == 0 else (self.position + offset if whence == 1 else self.length + offset)
        return self.position

    def read(self, size: int = -1) -> bytes:
        size = self.length - self.position if size is None or size < 0 else size
        size = max(0, min(size, self.length - self.position))
        if size > WINDOW:
            raise tarfile.ReadError(f"a tar header claims {size} bytes")
        if not self.start <= self.position <= self.position + size <= self.start + len(self.data):
            self.start = self.position
            self.data = self.storage.read_range(self.path, self.base + self.start,
                                                min(max(size, WINDOW), self.length - self.start))
        at = self.position - self.start
        self.position += size
        return self.data[at:at + size]

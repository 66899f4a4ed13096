"""The page headers of one Parquet column chunk, read without decompressing any page.

pyarrow decompresses a whole page before it yields any value of it, and it trusts the page's
header for the size: a page of 1.5 GiB of zeros, 49 KB compressed, costs gigabytes of memory
before any per-sample limit can see the value it holds.  The footer gives a column chunk's total
sizes only; its pages' sizes and value counts are in their headers, small Thrift structs (compact
protocol) in front of each page.  `pages` walks them with small reads, skipping every page's
body, so a reader can refuse a page before pyarrow decompresses it.

PageHeader fields used: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, and num_values
(field 1) of the data page (5), dictionary page (7) or data page v2 (8) header.  Every other field is parsed
only to be skipped.  A header that does not parse, or one larger than `MAX_HEADER_BYTES`, is a
ValueError naming its byte offset.
"""
from __future__ import annotations

from typing import NamedTuple

HEAD_READ = 1 << 12           # bytes read for a header first; more (up to MAX_HEADER_BYTES) if it is longer
MAX_HEADER_BYTES = 1 << 20    # a page header's statistics may hold min/max values, but not more than this
MAX_DEPTH = 16                # nested structs and lists a header may hold
VALUE_HEADERS = (5, 7, 8)     # data_page_header, dictionary_page_header, data_page_header_v2: num_values is field 1
DICTIONARY_PAGE = 2           # the PageType of a dictionary page (held while its whole column chunk is read)
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


class Page(NamedTuple):
    """One page of a column chunk, from its header."""

    offset: int         # the byte offset of its header in the file
    uncompressed: int   # bytes once decompressed (what pyarrow allocates for it)
    values: int         # values it holds (nulls included); 0 for an index page
    dictionary: bool    # a dictionary page
    stored: int         # bytes in the file (compressed); an uncompressed page's values take these, whatever it claims


def pages(file, start: int, length: int):
    """The Page of each page header in file[start:start + length] (one column chunk, from the footer's
    dictionary or data page offset and total_compressed_size), in order; ValueError for a header that
    does not parse or a page that runs past the chunk."""
    position, end = start, start + length
    while position < end:
        header, header_bytes = _header(file, position, min(end - position, MAX_HEADER_BYTES))
        compressed, uncompressed = header.get(3), header.get(2)
        if not isinstance(compressed, int) or not isinstance(uncompressed, int) or min(compressed, uncompressed) < 0:
            raise ValueError(f"byte offset {position}: a page header without its sizes")
        counts = [header[field].get(1) for field in VALUE_HEADERS if isinstance(header.get(field), dict)]
        yield Page(position, uncompressed, counts[0] if counts and isinstance(counts[0], int) else 0,
                   header.get(1) == DICTIONARY_PAGE, compressed)
        position += header_bytes + compressed
    if position != end:
        raise ValueError(f"byte offset {end}: a page runs {position - end} bytes past the end of its column chunk")


def _header(file, position: int, most: int) -> tuple:
    """(the page header at `position` as {field id: value}, its length in bytes), reading as little as it can."""
    want = min(HEAD_READ, most)
    while True:
        file.seek(position)
        data = file.read(want)
        try:
            return _Reader(data).struct(0)
        except IndexError:  # the header goes on past what was read
            if want >= most or len(data) < want:
                raise ValueError(f"byte offset {position}: a page header that does not end within "
                                 f"{len(data):,} bytes") from None
            want = min(want * 16, most)
        except ValueError as exc:
            raise ValueError(f"byte offset {position}: {exc}") from None


class _Reader:
    """Thrift compact protocol over `data`: structs as {field id: value}; binaries, doubles and
    collections skipped (None).  IndexError when `data` ends before the value does."""

    def __init__(self, data: bytes):
        self.data, self.position = data, 0

    def struct(self, depth: int) -> tuple:
        """({field id: int, bool or nested dict}, the position after the struct's stop byte)."""
        if depth > MAX_DEPTH:
            raise ValueError(f"a page header nested more than {MAX_DEPTH} deep")
        fields, last = {}, 0
        while (byte := self._byte()) != _STOP:
            kind, delta = byte & 0x0F, byte >> 4
            last = last + delta if delta else self._zigzag()
            fields[last] = self.value(kind, depth)
        return fields, self.position

    def value(self, kind: int, depth: int):
        """The value of one field or element of type `kind`."""
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self._byte()
        if kind in (_I16, _I32, _I64):
            return self._zigzag()
        if kind == _DOUBLE:
            return self._skip(8)
        if kind == _BINARY:
            return self._skip(self._varint())
        if kind in (_LIST, _SET, _MAP):
            return self._collection(kind, depth)
        if kind == _STRUCT:
            return self.struct(depth + 1)[0]
        raise ValueError(f"a page header holds Thrift type {kind}")

    def _collection(self, kind: int, depth: int) -> None:
        """Skip a list, set or map (each element takes at least one byte: `data` bounds the loop)."""
        if kind == _MAP:
            count = self._varint()
            kinds = divmod(self._byte(), 16) if count else ()
        else:
            head = self._byte()
            count, kinds = (head >> 4 if head >> 4 != 15 else self._varint()), (head & 0x0F,)
        for _ in range(count):
            for element in kinds:  # a bool element is a byte of its own, unlike a bool field
                self._byte() if element in (_TRUE, _FALSE) else self.value(element, depth + 1)

    def _skip(self, count: int) -> None:
        if self.position + count > len(self.data):
            raise IndexError
        self.position += count

    def _byte(self) -> int:
        byte = self.data[self.position]
        self.position += 1
        return byte

    def _varint(self) -> int:
        result = shift = 0
        while (byte := self._byte()) & 0x80:
            result |= (byte & 0x7F) << shift
            shift += 7
            if shift > 63:
                raise ValueError("a page header holds a varint longer than 10 bytes")
        return result | byte << shift

    def _zigzag(self) -> int:
        value = self._varint()
        return (value >> 1) ^ -(value & 1)

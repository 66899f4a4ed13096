"""HTTP multi-range reads (`HttpStorage.read_ranges`, `storage/byteranges.py`): many byte ranges in one request,
the multipart/byteranges answer parsed by each part's Content-Range and never trusted, and a server that will
not answer several ranges at once read range by range."""
from __future__ import annotations

import pytest

from corgi_io.errors import StorageError
from corgi_io.storage.byteranges import covers, cut_ranges, parse_parts, range_header
from corgi_io.storage.http import HttpStorage
from helpers.misbehaving_server import MisbehavingServer, _send

DATA = bytes(range(256)) * 64  # 16 KiB, every byte's value its offset mod 256
RANGES = [(10, 5), (4000, 300), (16000, 384)]


def multipart(parts, boundary="3d6b6a416f9b5") -> tuple:
    """(Content-Type, body) of a multipart/byteranges answer holding [(start, data)]."""
    body = b"".join(b"\r\n--" + boundary.encode() + b"\r\nContent-Type: application/octet-stream\r\n"
                    + f"Content-Range: bytes {start}-{start + len(data) - 1}/{len(DATA)}".encode()
                    + b"\r\n\r\n" + data for start, data in parts) + b"\r\n--" + boundary.encode() + b"--\r\n"
    return f"multipart/byteranges; boundary={boundary}", body


def test_a_multipart_answer_is_cut_by_its_parts_content_ranges():
    content_type, body = multipart([(offset, DATA[offset:offset + length]) for offset, length in RANGES])
    parts = parse_parts("http://x/f", content_type, body)
    assert cut_ranges("http://x/f", parts, RANGES) == [DATA[o:o + n] for o, n in RANGES]
    assert range_header(RANGES) == "bytes=10-14,4000-4299,16000-16383"


def test_a_part_holding_the_boundary_in_its_data_is_read_by_its_length():
    data = b"\r\n--3d6b6a416f9b5--\r\n" * 3
    content_type, body = multipart([(0, data)])
    assert cut_ranges("u", parse_parts("u", content_type, body), [(0, len(data))]) == [data]


@pytest.mark.parametrize("damage, message", [
    (lambda body: body.replace(b"Content-Range", b"Content-Rang", 1), "without a Content-Range"),
    (lambda body: body[:body.index(b"\r\n\r\n") + 4 + 2], "cut short"),
])
def test_a_malformed_multipart_answer_is_one_line_naming_the_url(damage, message):
    content_type, body = multipart([(offset, DATA[offset:offset + length]) for offset, length in RANGES])
    with pytest.raises(StorageError, match=message) as info:
        parse_parts("http://host/columns/rows.bin", content_type, damage(body))
    assert str(info.value).startswith("http://host/columns/rows.bin: ") and "\n" not in str(info.value)


def test_parts_that_miss_an_asked_range_are_refused():
    parts = [(10, DATA[10:15])]
    assert not covers(parts, RANGES) and covers(parts, RANGES[:1])
    with pytest.raises(StorageError, match="does not cover offset 4000"):
        cut_ranges("u", parts, RANGES)


@pytest.mark.slow
def test_nginx_answers_several_ranges_in_one_request(http_server):
    url = http_server.put("multi/data.bin", DATA)
    before = len(http_server.requests())
    storage = HttpStorage(url.rsplit("/", 1)[0])
    assert storage.ranges_per_request > 1
    assert storage.read_ranges("data.bin", RANGES) == [DATA[o:o + n] for o, n in RANGES]
    assert len(http_server.requests()) - before == 1 and storage.ranges_per_request > 1


def first_range_only(owner, handler, fault, body):
    """A server that answers a multi-range request with its first range alone (RFC 9110 allows it)."""
    first = handler.headers.get("Range", "").removeprefix("bytes=").split(",")[0]
    start, stop = (int(x) for x in first.split("-"))
    _send(handler, 206, DATA[start:stop + 1] if body else b"",
          {"Content-Range": f"bytes {start}-{stop}/{len(DATA)}"}, length=stop + 1 - start)


@pytest.mark.slow
@pytest.mark.parametrize("answer", [None, first_range_only], ids=["whole file", "first range only"])
def test_a_server_that_will_not_answer_several_ranges_is_asked_range_by_range(tmp_path, answer):
    (tmp_path / "data.bin").write_bytes(DATA)
    with MisbehavingServer(tmp_path, **({"answer": answer} if answer else {})) as server:
        storage = HttpStorage(server.url)
        assert storage.read_ranges("data.bin", RANGES) == [DATA[o:o + n] for o, n in RANGES]
        assert storage.ranges_per_request == 1  # and not asked so again
        requests = server.requests
        assert storage.read_ranges("data.bin", RANGES) == [DATA[o:o + n] for o, n in RANGES]
        assert server.requests - requests == len(RANGES)

"""HttpStorage (urllib3): exact ranged reads from a real nginx, and refusals of misbehaving real servers."""
from __future__ import annotations

import http.server
import os
import random
import threading

import pytest

from corgi_io.errors import StorageError
from corgi_io.storage.http import HttpStorage
from corgi_io.storage.remote import FsspecStorage
from corgi_io.storage import open_storage

DATA = random.Random(5).randbytes(200_000)


@pytest.fixture(scope="module")
def served(http_server):
    http_server.put("h/a.bin", DATA)
    with open_storage(http_server.url + "h") as storage:
        yield storage


def test_open_storage_picks_urllib3_for_http_unless_told_otherwise():
    url = "http://127.0.0.1:1/ds"
    assert isinstance(open_storage(url), HttpStorage)
    assert isinstance(open_storage(url, headers={"Authorization": "x"}, timeout=5, retry_seconds=1), HttpStorage)
    assert isinstance(open_storage(url, backend="fsspec"), FsspecStorage)
    assert isinstance(open_storage(url, client_kwargs={}), FsspecStorage)  # fsspec's own options go to fsspec
    with pytest.raises(ValueError, match="backend must be"):
        open_storage(url, backend="curl")


@pytest.mark.slow
def test_ranged_reads_equal_the_file_bytes(served):
    rng = random.Random(1)
    for _ in range(40):
        offset = rng.randrange(len(DATA))
        length = rng.randrange(1, len(DATA) - offset + 1)
        assert served.read_range("a.bin", offset, length) == DATA[offset:offset + length]
    assert served.read_range("a.bin", 0, len(DATA)) == DATA
    assert served.read_all("a.bin") == DATA and served.size("a.bin") == len(DATA)
    assert served.exists("a.bin") and not served.exists("nope.bin")
    assert served.retried == 0


@pytest.mark.slow
def test_404_fails_at_once_naming_the_url(served):
    with pytest.raises(FileNotFoundError, match=r"h/nope\.bin") as caught:
        served.read_range("nope.bin", 0, 10)
    assert isinstance(caught.value, OSError) and served.retried == 0
    with pytest.raises(StorageError, match=r"h/a\.bin: short read at offset 199990: got 10 of 20 bytes"):
        served.read_range("a.bin", len(DATA) - 10, 20)


@pytest.mark.slow
def test_reads_after_fork_use_a_new_pool(served):
    assert served.read_range("a.bin", 0, 10) == DATA[:10]
    pid = os.fork()
    if pid == 0:
        os._exit(0 if served.read_range("a.bin", 100, 1000) == DATA[100:1100] else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert served.read_range("a.bin", 7, 3) == DATA[7:10]


class Misbehaving:
    """A real http.server on 127.0.0.1 whose GET answer `answer(handler)` writes by hand."""

    def __init__(self, answer):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                answer(self)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/d"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def storage(self, **options) -> HttpStorage:
        return HttpStorage(self.url, retry_seconds=0.3, backoff=0.01, max_backoff=0.05, **options)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def send(handler, status: int, body: bytes, length: int | None = None, **headers):
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)
    if length is not None:
        handler.close_connection = True


def test_a_short_body_is_retried_then_refused_naming_url_and_offset():
    with Misbehaving(lambda h: send(h, 206, DATA[10:15], 20, Content_Range="bytes 10-29/200000")) as server:
        storage = server.storage()
        with pytest.raises(StorageError, match=r"^http://127\.0\.0\.1:\d+/d/a\.bin at offset 10: read failed after "
                                               r"\d+ attempts in 0\.3 s: ProtocolError") as caught:
            storage.read_range("a.bin", 10, 20)
    assert "\n" not in str(caught.value) and storage.retried >= 1


def test_a_wrong_content_range_is_refused_at_once():
    with Misbehaving(lambda h: send(h, 206, DATA[11:31], Content_Range="bytes 11-30/200000")) as server:
        storage = server.storage()
        with pytest.raises(StorageError, match=r"/d/a\.bin at offset 10: Content-Range 'bytes 11-30/200000' "
                                               r"does not match bytes 10-29$"):
            storage.read_range("a.bin", 10, 20)
    assert storage.retried == 0


def test_200_with_the_whole_file_is_refused_for_a_range_and_taken_for_the_whole_file():
    with Misbehaving(lambda h: send(h, 200, DATA)) as server:
        storage = server.storage()
        with pytest.raises(StorageError, match=r"/d/a\.bin: range ignored at offset 5: HTTP 200 with 200000 bytes "
                                               r"for a range of 10$"):
            storage.read_range("a.bin", 5, 10)
        assert storage.read_range("a.bin", 0, len(DATA)) == DATA
    assert storage.retried == 0


def test_5xx_is_retried_and_403_refused_at_once():
    answers = iter([503, 502])
    with Misbehaving(lambda h: send(h, next(answers, 206), DATA[:4], Content_Range="bytes 0-3/200000")) as server:
        storage = server.storage()
        assert storage.read_range("a.bin", 0, 4) == DATA[:4] and storage.retried == 2
    with Misbehaving(lambda h: send(h, 403, b"no")) as server:
        storage = server.storage()
        with pytest.raises(StorageError, match=r"/d/a\.bin at offset 0: read failed: HttpStatusError: HTTP 403"):
            storage.read_range("a.bin", 0, 4)
    assert storage.retried == 0


def test_headers_are_sent_and_redirect_loops_are_bounded():
    def answer(h):
        if h.headers.get("Authorization") != "Bearer t":
            return send(h, 401, b"")
        send(h, 302, b"", Location=h.path)  # to itself, forever

    with Misbehaving(answer) as server:
        with pytest.raises(StorageError, match=r"read failed: HttpStatusError: HTTP 401"):
            server.storage().read_range("a.bin", 0, 4)
        storage = server.storage(headers={"Authorization": "Bearer t"})
        with pytest.raises(StorageError, match=r"/d/a\.bin at offset 0: read failed: (MaxRetryError|ResponseError).*"
                                               r"redirect"):
            storage.read_range("a.bin", 0, 4)
    assert storage.retried == 0


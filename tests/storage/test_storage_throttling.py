"""Throttling and stalls are survived, never hung on (issue 31, item 3): HttpStorage against a real threaded
HTTP server on 127.0.0.1 made to misbehave (tests/helpers/misbehaving_server.py): 429/503 with Retry-After,
connections accepted and never answered, bodies cut, reset or stalled halfway; a bound on concurrent requests;
an epoch that yields every sample exactly once through all of it. S3: SlowDown is retried, a 403 names the URL."""
from __future__ import annotations

import email.utils
import threading
import time
from collections import Counter

import pytest

from corgi_io.errors import ArgumentError, StorageError
from corgi_io.manifest import open_manifest
from corgi_io.storage import open_storage
from corgi_io.storage.retry import TRANSIENT, parse_retry_after
from helpers.misbehaving_server import MisbehavingServer

DATA = bytes(range(256)) * 400
FAST = {"retry_seconds": 3.0, "backoff": 0.01, "max_backoff": 0.05}


@pytest.fixture
def served(tmp_path):
    """A folder holding a.bin (DATA), to serve."""
    (tmp_path / "a.bin").write_bytes(DATA)
    return tmp_path


def test_retry_after_is_read_as_seconds_or_an_http_date():
    assert parse_retry_after("3") == 3.0 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = time.time()
    assert parse_retry_after(email.utils.formatdate(now + 10, usegmt=True), now=now) == pytest.approx(10, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 10, usegmt=True), now=now) == 0.0


def test_max_requests_is_checked():
    for bad in (0, 1.5, True, "4"):
        with pytest.raises(ArgumentError, match="max_requests must be an integer >= 1"):
            open_storage("http://127.0.0.1:1/x", max_requests=bad)


@pytest.mark.slow
def test_429_and_503_are_retried_no_sooner_than_retry_after(served):
    """Two throttled answers with Retry-After: 1, backoff ceilings of 0.05 s: the read waits the 2 s asked for."""
    with MisbehavingServer(served, faults=("throttle",), every=1, retry_after=1, most=2) as server:
        storage = open_storage(server.url, **FAST)
        start = time.monotonic()
        assert storage.read_range("a.bin", 100, 50) == DATA[100:150]
        elapsed = time.monotonic() - start
    assert server.done["throttle"] == 2 and storage.retried == 2
    assert 2.0 <= elapsed < 2.8


@pytest.mark.slow
def test_a_retry_after_past_the_budget_ends_in_one_line_naming_the_url(served):
    with MisbehavingServer(served, faults=("throttle",), every=1, retry_after=60) as server:
        storage = open_storage(server.url, retry_seconds=0.5, backoff=0.01)
        start = time.monotonic()
        with pytest.raises(StorageError, match=rf"^{server.url}/a\.bin at offset 7: read failed after 2 attempts in "
                                               r"0\.5 s: HttpStatusError: HTTP 50?3 [^\n]*$"):
            storage.read_range("a.bin", 7, 10)
    assert time.monotonic() - start < 1.5  # the budget, not the 60 s asked for


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["stall", "stall_body"])
def test_a_stalled_answer_ends_within_the_deadline_in_a_retry_then_an_error(served, fault):
    """The default 30 s socket timeout is not what bounds a stall: `deadline` (0.4 s) bounds each attempt."""
    with MisbehavingServer(served, faults=(fault,), every=1) as server:
        storage = open_storage(server.url, deadline=0.4, retry_seconds=0.5, backoff=0.01)
        start = time.monotonic()
        with pytest.raises(StorageError, match=rf"^{server.url}/a\.bin at offset 0: read failed after [2-9] attempts "
                                               r"in 0\.[4-9] s: \w+") as caught:
            storage.read_range("a.bin", 0, 60_000)
        elapsed = time.monotonic() - start
    assert "\n" not in str(caught.value) and storage.retried >= 1 and elapsed < 2.0


def trickle(owner, handler, fault, body):
    """The headers of a 40-byte answer, then one byte every 0.1 s: no socket read ever times out, yet the
    body takes 4 s."""
    handler.send_response(206)
    handler.send_header("Content-Length", "40")
    handler.send_header("Content-Range", "bytes 0-39/40")
    handler.end_headers()
    for _ in range(40):
        if owner.closing.wait(0.1):
            return
        handler.wfile.write(b"x")
        handler.wfile.flush()


@pytest.mark.slow
def test_a_trickling_body_is_cut_at_the_deadline():
    with MisbehavingServer(".", answer=trickle) as server:
        storage = open_storage(server.url, timeout=0.5, deadline=0.5, retry_seconds=0.6, backoff=0.01)
        start = time.monotonic()
        with pytest.raises(StorageError, match=r"/t\.bin at offset 0: read failed after \d+ attempts in 1\.\d s: "
                                               r"DeadlineError: answer not complete within the 0\.5 s deadline"):
            storage.read_range("t.bin", 0, 40)
    assert time.monotonic() - start < 2.5


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["cut", "reset"])
def test_half_a_body_then_a_closed_connection_is_retried_then_names_url_and_offset(served, fault):
    with MisbehavingServer(served, faults=(fault,), every=1) as server:
        storage = open_storage(server.url, retry_seconds=0.3, backoff=0.01)
        with pytest.raises(StorageError, match=rf"^{server.url}/a\.bin at offset 1000: read failed after \d+ attempts "
                                               r"in 0\.3 s: ProtocolError: [^\n]*$"):
            storage.read_range("a.bin", 1000, 50_000)
        assert storage.retried >= 1
        server.every = 2  # now every other answer is whole: the read gets through
        assert storage.read_range("a.bin", 1000, 50_000) == DATA[1000:51_000]


@pytest.mark.slow
def test_max_requests_bounds_the_requests_in_flight(served):
    """12 threads read at once from a server that takes 0.1 s per answer: it never sees more than 3 at once."""
    def read_all(storage):
        threads = [threading.Thread(target=storage.read_range, args=("a.bin", i, 10)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    with MisbehavingServer(served, delay=0.1) as server:
        read_all(open_storage(server.url, max_requests=3))
        bounded = server.in_flight_most
        server.in_flight_most = 0
        read_all(open_storage(server.url))  # the default, 16
    assert bounded == 3 and server.in_flight_most > 3


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory):
    """A folder holding `pack`: 30 small images in blocks of 4 over 5 shards."""
    from helpers.packs import small_image_pack  # here: the tests above need no packing

    root = tmp_path_factory.mktemp("throttled")
    small_image_pack(root)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("faults", [("throttle",), ("stall", "stall_body"), ("cut", "reset"),
                                    ("throttle", "stall", "cut", "reset", "stall_body")])
def test_an_epoch_through_a_misbehaving_server_yields_every_sample_once(pack_dir, faults):
    """Every second request (manifest files, shard ranges) misbehaves, 10 in all: the epoch is whole."""
    pytest.importorskip("torch")
    from corgi_io.loaders import CorgiPileDataset, Reading

    options = {**FAST, "deadline": 0.5, "open_retry_seconds": 3.0}
    with MisbehavingServer(pack_dir, faults=faults, every=2, most=10) as server:
        ds = CorgiPileDataset(server.url + "/pack", seed=1, reading=Reading(storage_options=options))
        ds.set_epoch(0)
        keys = [sample["key"] for sample in ds]
    assert Counter(keys) == Counter(open_manifest(pack_dir / "pack").keys())
    assert sum(server.done.values()) == 10 and set(server.done) == set(faults)  # every fault was met

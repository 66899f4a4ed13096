"""The latency proxy of bench/latency.py (tests/helpers/latency_proxy.py) in front of a real nginx: every request
on a keep-alive connection pays the delay, bytes pass unchanged, the bandwidth cap holds, requests are counted."""
from __future__ import annotations

import http.client
import os
import time

import pytest

from helpers.latency_proxy import LatencyProxy

pytestmark = pytest.mark.slow
DELAY, N = 0.05, 8


def get_sequentially(port: int, path: str, n: int) -> tuple:
    """(seconds, bodies) of `n` GETs of `path`, one after the other on ONE keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    bodies, start = [], time.perf_counter()
    for i in range(n):
        conn.request("GET", path, headers={"Range": f"bytes={i * 1000}-{i * 1000 + 4095}"})
        response = conn.getresponse()
        assert response.status == 206
        bodies.append(response.read())
    seconds = time.perf_counter() - start
    conn.close()
    return seconds, bodies


@pytest.fixture(scope="module")
def served(http_server):
    data = os.urandom(1 << 20)
    http_server.put("latency/blob", data)
    return http_server, data


def test_each_request_on_a_connection_pays_the_delay_and_bytes_pass_unchanged(served):
    server, data = served
    with LatencyProxy(server.port, DELAY) as slow, LatencyProxy(server.port, 0.0) as fast:
        slow_seconds, slow_bodies = get_sequentially(slow.port, "/latency/blob", N)
        fast_seconds, fast_bodies = get_sequentially(fast.port, "/latency/blob", N)
        assert slow.requests() == N and fast.requests() == N
    expected = [data[i * 1000:i * 1000 + 4096] for i in range(N)]
    assert slow_bodies == expected and fast_bodies == expected
    assert N * DELAY <= slow_seconds < N * DELAY + 1.0  # per request, not once per connection
    assert fast_seconds < N * DELAY / 2


def test_the_bandwidth_cap_bounds_the_rate(served):
    server, data = served
    rate = 4 << 20  # 1 MiB at 4 MiB/s: >= 0.25 s
    with LatencyProxy(server.port, 0.0, rate) as capped:
        conn = http.client.HTTPConnection("127.0.0.1", capped.port, timeout=10)
        start = time.perf_counter()
        conn.request("GET", "/latency/blob")
        body = conn.getresponse().read()
        seconds = time.perf_counter() - start
        conn.close()
    assert body == data
    assert len(data) / rate * 0.9 <= seconds < len(data) / rate + 1.0

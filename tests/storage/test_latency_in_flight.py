"""Reads in flight sized by the bandwidth-delay product (corgi_io/reading/in_flight.py): a simulated link where a read
of n bytes shared by c reads takes  latency + n * c / bandwidth  (or keeps its speed however many share it)."""
from __future__ import annotations

import math
import threading
import time

import pytest

from corgi_io.reading.in_flight import MAX_IN_FLIGHT_BYTES, InFlight
from corgi_io.reading.read_ahead import read_ahead

PIECE = 4 << 20


def feed(gate: InFlight, reads: int, latency: float, bandwidth: float, shared: bool = True) -> list:
    """`reads` reads of PIECE bytes, each sharing the link with as many as the gate allows; the limits seen."""
    limits = []
    for _ in range(reads):
        sharing = gate.limit
        gate.observe(PIECE, latency + PIECE * (sharing if shared else 1) / bandwidth, sharing)
        limits.append(gate.limit)
    return limits


@pytest.mark.parametrize("latency,bandwidth", [(0.03, 200e6), (0.03, 1e9), (0.1, 100e6), (0.005, 200e6)])
def test_the_limit_is_the_bandwidth_delay_product_in_a_few_reads(latency, bandwidth):
    gate = InFlight(1, 64)
    limits = feed(gate, 12, latency, bandwidth)
    wanted = 1 + math.ceil(bandwidth * latency / PIECE)
    assert limits[5:] == [wanted] * 7  # reached within 6 reads, and held
    assert gate.latency == pytest.approx(latency, rel=0.01) and gate.bandwidth == pytest.approx(bandwidth, rel=0.01)


def test_a_link_whose_reads_keep_their_speed_gets_every_thread():
    gate = InFlight(1, 16)
    assert feed(gate, 12, 0.03, 200e6, shared=False)[-1] == 16


def test_no_latency_keeps_the_storages_own_count():
    gate = InFlight(3, 8)  # HttpStorage's (first, most) on loopback, where reads are CPU-bound
    assert feed(gate, 12, 0.0, 300e6)[-1] == 3


def test_bytes_in_flight_are_bounded_whatever_the_link():
    gate = InFlight(1, 1000)
    assert feed(gate, 12, 1.0, 10e9)[-1] == 1 + MAX_IN_FLIGHT_BYTES // PIECE


@pytest.mark.slow
def test_reads_on_a_distant_link_overlap_as_its_product_asks():
    """Real threads and sleeps: 20 ms before each read's first byte, 100 MB/s shared -> 1 + ceil(2 MB / 1 MB) = 3."""
    gate, lock, running, most = InFlight(1, 8), threading.Lock(), [0], [0]

    def read(step):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            sharing = running[0]
        time.sleep(0.02 + (1 << 20) * sharing / 100e6)
        with lock:
            running[0] -= 1
        return bytes(1 << 20)

    list(read_ahead(range(60), lambda step: gate.run(read, step), ahead=8, threads=8))
    assert gate.limit in (3, 4) and 3 <= most[0] <= 8

"""A worker's pooled shared memory is its own: a process forked from one whose pool holds buffers (the pytest process,
after a test gathered a batch in it) starts with none.  Inherited, a released buffer was taken by every worker forked
from that parent, which wrote its batches over the others' (test_raw_bytes_cross_two_workers_as_one_buffer failed once
so in a full-suite run: a batch's bytes did not match its offsets)."""
from __future__ import annotations

import multiprocessing

import pytest

from corgi_io.loaders import shared_memory

PARENT, CHILD = b"p" * 10, b"c" * 10


def write_a_batch() -> None:
    _, view = shared_memory.WORKER_BUFFERS.take(len(CHILD))
    view[:] = CHILD


@pytest.mark.slow
def test_a_forked_worker_never_takes_a_buffer_of_its_parents_pool(monkeypatch):
    monkeypatch.setattr(shared_memory.WORKER_BUFFERS, "buffers", [])
    whole, view = shared_memory.WORKER_BUFFERS.take(len(PARENT))
    view[:] = PARENT
    whole[-1] = 1  # its batch received and copied out: released, nothing here refers to it but the pool
    del whole, view
    child = multiprocessing.get_context("fork").Process(target=write_a_batch)
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert bytes(shared_memory.WORKER_BUFFERS.buffers[0][:len(PARENT)].numpy()) == PARENT  # a sibling would read it

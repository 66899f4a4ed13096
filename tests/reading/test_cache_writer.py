"""The cache's background writer (`CacheWriter`) and the piece locks of a cache folder (issue 31): an offer never
waits unless asked, a full queue refuses, a flush waits for every write, the thread ends when idle; a piece's lock
excludes the threads that fetch the same piece, not the others, and creates no file per piece.  Items here weigh
one byte each, so a capacity of n bytes is n items."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from corgi_io.reading.cache_writer import CacheWriter
from corgi_io.storage.cache_folder import OFD_LOCKS, CacheFolder


def blocked_writer(capacity: int):
    """(writer, gate, written): a writer whose writes wait for `gate`, and the items it has written, in order."""
    gate, written = threading.Event(), []

    def write(item):
        gate.wait(10)
        written.append(item)

    return CacheWriter(write, capacity=capacity, linger=0.05), gate, written


def test_a_full_queue_refuses_at_once_and_a_flush_waits_for_every_write():
    writer, gate, written = blocked_writer(capacity=2)
    started = time.monotonic()
    accepted = [writer.offer(i, 1) for i in range(6)]  # one being written (once taken), two waiting, the rest refused
    assert time.monotonic() - started < 1.0  # no offer waited for the blocked write
    assert accepted.count(True) in (2, 3) and accepted[:2] == [True, True] and writer.dropped == accepted.count(False)
    gate.set()
    writer.flush()
    assert written == [i for i, ok in enumerate(accepted) if ok]


def test_the_queue_holds_at_most_its_items_however_small_they_are():
    """Each waiting piece holds its lock's file descriptor: thousands of tiny pieces must not wait at once."""
    gate, written = threading.Event(), []
    writer = CacheWriter(lambda item: (gate.wait(10), written.append(item)), capacity=1 << 30, linger=0.05,
                         most_items=4)
    accepted = [writer.offer(i, 1) for i in range(100)]
    assert accepted.count(True) in (4, 5) and writer.dropped == accepted.count(False)
    gate.set()
    writer.flush()
    assert written == [i for i, ok in enumerate(accepted) if ok]


def test_an_offer_that_waits_is_written():
    writer, gate, written = blocked_writer(capacity=1)
    done = []
    waiter = threading.Thread(target=lambda: done.append([writer.offer(i, 1, wait=True) for i in range(4)]))
    waiter.start()
    time.sleep(0.2)
    assert not done  # waiting for room, not refused
    gate.set()
    waiter.join(10)
    writer.flush()
    assert done == [[True] * 4] and written == [0, 1, 2, 3] and writer.dropped == 0


def test_a_piece_larger_than_the_queue_is_taken_when_none_waits():
    writer, gate, written = blocked_writer(capacity=10)
    assert writer.offer("big", 100)  # the first piece, being written
    time.sleep(0.1)
    assert writer.offer("next", 100) and not writer.offer("third", 1)  # alone in the queue, it fits; then full
    gate.set()
    writer.flush()
    assert written == ["big", "next"] and writer.dropped == 1


def test_the_writer_thread_ends_when_idle_and_is_not_a_daemon():
    writer, gate, _ = blocked_writer(capacity=4)
    gate.set()
    writer.offer("x", 1)
    thread = writer._thread
    assert thread is not None and not thread.daemon  # the process writes what waits before it ends
    thread.join(5)
    assert not thread.is_alive() and writer._thread is None
    assert writer.offer("y", 1)  # a new thread for a new piece
    writer.flush()


def test_a_write_that_raises_leaves_the_writer_usable():
    written = []

    def write(item):
        if item == "bad":
            raise RuntimeError("bug")
        written.append(item)

    writer = CacheWriter(write, capacity=4, linger=0.05)
    hook, threading.excepthook = threading.excepthook, lambda args: None
    try:
        writer.offer("bad", 1)
        writer.flush()
        writer.offer("good", 1)
        writer.flush()
    finally:
        threading.excepthook = hook
    assert written == ["good"]


def hold_piece(folder: CacheFolder, key: str, held: threading.Event, release: threading.Event):
    with folder.fetching(key):
        held.set()
        release.wait(10)


@pytest.mark.parametrize("same_key", [True, False])
def test_a_piece_lock_excludes_the_same_piece_only(tmp_path, same_key):
    folder = CacheFolder(tmp_path)
    held, release, got = threading.Event(), threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_piece, args=(folder, "0-8", held, release))
    holder.start()
    held.wait(10)
    other = threading.Thread(target=hold_piece, args=(folder, "0-8" if same_key else "8-16", got, threading.Event()))
    other.daemon = True
    other.start()
    assert got.wait(0.5) is not same_key  # the same piece waits for its holder; another piece does not
    release.set()
    holder.join(10)
    assert got.wait(10)


@pytest.mark.skipif(not OFD_LOCKS, reason="byte locks on one file are Linux's")
def test_piece_locks_create_no_file_per_piece(tmp_path):
    folder = CacheFolder(tmp_path)
    for start in range(0, 800, 8):
        with folder.fetching(f"{start}-{start + 8}"):
            pass
    assert sorted(os.listdir(tmp_path)) == [".lock-pieces"] and folder.sizes() == {}


@pytest.mark.skipif(sys.platform != "linux", reason="the lock is dropped by Linux when its holder dies")
def test_a_piece_lock_dies_with_its_process(tmp_path):
    folder = CacheFolder(tmp_path)
    pid = os.fork()
    if pid == 0:  # the child takes the lock and dies holding it
        folder.fetching("0-8").__enter__()
        os._exit(0)
    os.waitpid(pid, 0)
    got = threading.Event()
    threading.Thread(target=hold_piece, args=(folder, "0-8", got, threading.Event()), daemon=True).start()
    assert got.wait(5)

"""A remote pack's first pieces do not wait for their row groups: a whole block's bytes are read while its rows are
fetched (issue 31 §2: the two round trips overlap instead of adding up before a process's first pieces)."""
from __future__ import annotations

import shutil
import threading

import pytest

from corgi_io import ManifestError
from corgi_io.manifest import open_manifest
from corgi_io.reading.piece_reader import PieceReader
from corgi_io.storage import open_storage
from helpers.packs import small_image_pack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(tmp_path_factory, http_server):
    pack = small_image_pack(tmp_path_factory.mktemp("latency-rows"))
    shutil.copytree(pack, http_server.root / "latency-rows")
    return http_server.url + "latency-rows"


def whole_block(m, block: int) -> tuple:
    first = int(m.blocks.first[block])
    return block, first, first + int(m.blocks.count[block])


def test_a_whole_blocks_bytes_are_read_while_its_rows_are_fetched(url, monkeypatch):
    m, storage, shard_read = open_manifest(url), open_storage(url), threading.Event()
    rows_storage = m.row_groups.storage
    fetch_rows, read_range = rows_storage.read_ranges, storage.read_range
    overlapped = []

    def slow_rows(relpath, ranges):
        overlapped.append(shard_read.wait(5))  # the block's read starts while its rows are still on their way
        return fetch_rows(relpath, ranges)

    def read(relpath, offset, length):
        shard_read.set()
        return read_range(relpath, offset, length)

    monkeypatch.setattr(rows_storage, "read_ranges", slow_rows)
    monkeypatch.setattr(storage, "read_range", read)
    piece = whole_block(m, 1)
    data = PieceReader(m, storage).read_piece(piece)
    assert overlapped == [True] and len(data) == int(m.blocks.length[1]) and m.rows_checked[1]


def test_a_bad_row_group_still_fails_the_piece_in_one_line(url, monkeypatch):
    m, storage = open_manifest(url), open_storage(url)
    rows_storage = m.row_groups.storage
    monkeypatch.setattr(rows_storage, "read_ranges", lambda relpath, ranges: [b"\0" * n for _, n in ranges])
    with pytest.raises(ManifestError, match=r"rows\.bin"):
        PieceReader(m, storage).read_piece(whole_block(m, 0))

"""Row groups (manifest version 5) read as a remote reader reads them, through a Storage: the block table is
checked whole before anything is allocated or read, and a storage that reads one range a request fetches a
few ranges per fetch, never a request per scattered block."""
from __future__ import annotations

import numpy as np
import pytest

from corgi_io.errors import ManifestError
from corgi_io.manifest import open_manifest
from corgi_io.manifest import row_groups
from corgi_io.manifest.row_groups import TABLE_COLUMNS, RowGroups, read_table
from corgi_io.storage import LocalStorage
from corgi_io.storage.base import RANGES_AT_ONCE
from helpers.packs import synthetic_pack


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("row-groups") / "pack"
    root.mkdir()
    synthetic_pack(root, 20_000)  # 313 blocks of 64
    return root


def counts_of(m) -> dict:
    return {"samples": m.num_samples, "blocks": len(m.blocks.first), "key_bytes": len(m.key_blob),
            "rows_bytes": m.rows_bytes, "fields": len(m.field_rows)}


def test_a_head_that_claims_more_samples_than_the_blocks_hold_is_refused_before_any_allocation(pack):
    m = open_manifest(pack)
    with pytest.raises(ManifestError, match="the blocks do not tile the head's 1099511627776 samples"):
        read_table(LocalStorage(str(pack)), {**counts_of(m), "samples": 2 ** 40}, m.version, "blocks.bin")


def test_a_row_group_larger_than_its_rows_can_deflate_to_is_refused_before_it_is_read(pack, tmp_path):
    m = open_manifest(pack)
    table = np.frombuffer((pack / "columns" / "blocks.bin").read_bytes(), "<i8").reshape(-1, len(TABLE_COLUMNS))
    big = table.copy()
    big[1:, TABLE_COLUMNS.index("rows")] += 300 << 20  # block 0's group "takes" 300 MB more
    root = tmp_path / "pack"
    (root / "columns").mkdir(parents=True)
    (root / "columns" / "blocks.bin").write_bytes(big.tobytes())
    counts = {**counts_of(m), "rows_bytes": m.rows_bytes + (300 << 20)}
    with pytest.raises(ManifestError, match="block 0's row group takes .* more than its rows can deflate to"):
        read_table(LocalStorage(str(root)), counts, m.version, "blocks.bin")


def test_one_range_a_request_storage_fetches_one_range_per_fetch_for_scattered_blocks(pack, monkeypatch):
    monkeypatch.setattr(row_groups, "FETCH_BYTES", 32 << 10)  # below the pack's 275 KB of groups
    monkeypatch.setattr(row_groups, "GAP_BYTES", 0)  # scattered groups never share a range
    m = open_manifest(pack)
    storage = LocalStorage(str(pack))
    assert storage.ranges_per_request == 1
    groups = RowGroups(storage, read_table(storage, counts_of(m), m.version, "blocks.bin"), counts_of(m), m.version)
    reads = storage.reads
    mine = np.arange(0, len(m.blocks.first), 8)  # one worker of 8: every 8th block
    groups.expect(mine)
    groups.ensure(0, 1)
    # one range a request: one round of RANGES_AT_ONCE requests, the block asked for and the next planned ones
    assert storage.reads - reads == groups.filled.sum() == RANGES_AT_ONCE
    monkeypatch.setattr(row_groups, "GAP_BYTES", 64 << 10)  # 7 groups of 880 bytes between two of mine: one range
    groups.ensure(8 * RANGES_AT_ONCE, 8 * RANGES_AT_ONCE + 1)
    assert storage.reads - reads == RANGES_AT_ONCE + 1 and groups.filled[mine].sum() > RANGES_AT_ONCE + 1
    assert not groups.filled[np.setdiff1d(np.arange(len(m.blocks.first)), mine)].any()  # a gap is not placed
    for name in ("size", "label", "checksum"):
        done = np.flatnonzero(groups.filled)
        rows = np.concatenate([np.arange(m.blocks.first[b], m.blocks.first[b] + m.blocks.count[b]) for b in done])
        np.testing.assert_array_equal(groups.arrays[name][rows], m.samples.arrays[name][rows])

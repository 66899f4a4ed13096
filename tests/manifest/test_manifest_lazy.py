"""Opening a pack costs O(blocks): per-sample rows are mapped or range-read on demand, validated per block
when first used, and a pickled Manifest is its root and storage options, reopened on the other side."""
from __future__ import annotations

import multiprocessing
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from corgi_io.manifest import reader as manifest_module
from helpers.packs import BLOCK, synthetic_pack
from corgi_io.errors import ManifestError
from corgi_io.manifest import open_manifest
from corgi_io.manifest.ranged import PAGE, RangedColumn
from corgi_io.manifest import row_groups
from corgi_io.manifest.row_groups import GroupedColumn
from corgi_io.storage import LocalStorage





@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    """A 20,000-sample synthetic pack (313 blocks)."""
    root = tmp_path_factory.mktemp("lazy") / "pack"
    root.mkdir()
    synthetic_pack(root, 20_000)
    return root


@pytest.fixture
def damaged(pack, tmp_path):
    """A copy of `pack` whose block 200 has a negative size: (root, first row of block 200)."""
    root = tmp_path / "pack"
    shutil.copytree(pack, root)
    path = root / "columns" / "sample_size.npy"
    sizes = np.load(path)
    sizes[200 * BLOCK + 5] = -1
    np.save(path, sizes)
    return root, 200 * BLOCK


def test_the_synthetic_pack_is_consistent(pack):
    m = open_manifest(pack)
    m.validate_rows()
    assert m.num_samples == 20_000 and len(m.blocks) == 313 and m.rows_checked.all()
    assert m.keys(5, 7) == ["k/0000005", "k/0000006"] and m.key(-1) == "k/0019999"


def test_open_checks_no_row_and_a_damaged_row_is_found_when_its_block_is_used(damaged):
    root, row = damaged
    m = open_manifest(root)  # the damaged row is not looked at
    assert not m.rows_checked.any()
    m.validate_rows(0, row)  # blocks 0..199 are intact
    assert m.rows_checked[:200].all() and not m.rows_checked[200:].any()
    with pytest.raises(ManifestError) as info:
        m.validate_rows(row + 10, row + 11)  # any row of block 200
    message = str(info.value)
    assert message.startswith(f"{root}/columns: ") and "sample size outside" in message and "\n" not in message
    with pytest.raises(ManifestError, match="sample size outside"):
        m.keys(row, row + BLOCK)  # keys are decoded only from validated rows
    assert m.keys(0, 2) == ["k/0000000", "k/0000001"]


def test_verify_validates_every_row(damaged):
    from corgi_io import verify

    with pytest.raises(ManifestError, match="sample size outside"):
        verify(damaged[0], progress=False)


def test_validate_rows_marks_exactly_the_blocks_it_checked(pack):
    m = open_manifest(pack)
    m.validate_rows(2 * BLOCK + 1, 3 * BLOCK + 1)  # a row of block 2 to the first row of block 3
    assert np.flatnonzero(m.rows_checked).tolist() == [2, 3]
    m.validate_rows(5, 5)  # empty: nothing
    assert np.flatnonzero(m.rows_checked).tolist() == [2, 3]


def test_full_validation_runs_in_steps_and_finds_a_late_fault(damaged, monkeypatch):
    monkeypatch.setattr(manifest_module, "ROWS_AT_ONCE", 1000)  # about 16 blocks a step
    root, row = damaged
    m = open_manifest(root)
    with pytest.raises(ManifestError, match="sample size outside"):
        m.validate_rows()
    assert m.rows_checked[:192].all() and not m.rows_checked[200:].any()  # steps before the fault are kept


def test_local_per_sample_columns_are_plain_arrays_over_maps(pack):
    m = open_manifest(pack)
    for column in (*m.samples.arrays.values(), m.key_offsets, m.key_blob):
        assert type(column) is np.ndarray and not column.flags.writeable and column.base is not None


def test_a_pickled_manifest_is_its_root_and_reopens(tmp_path):
    root = tmp_path / "pack"
    root.mkdir()
    synthetic_pack(root, 1_000_000)
    m = open_manifest(root)
    data = pickle.dumps(m)
    assert len(data) < 64 << 10, len(data)  # the columns are ~80 MB
    copy = pickle.loads(data)
    assert copy is not m and copy.root == m.root and copy.num_samples == 1_000_000
    assert not copy.rows_checked.any()  # the copy validates the rows it uses itself
    assert copy.keys(999_998, 1_000_000) == ["k/0999998", "k/0999999"]


def rows_in_child(m, start: int, stop: int) -> tuple:
    """Runs in a spawned or forkserver process: validate and read some rows of a received Manifest."""
    m.validate_rows(start, stop)
    return type(m.samples.size).__name__, m.keys(start, stop), int(m.samples.size[start:stop].sum())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_workers_reopen_the_pack(pack, method):
    m = open_manifest(pack)
    with multiprocessing.get_context(method).Pool(1) as pool:
        kind, keys, total = pool.apply(rows_in_child, (m, 1000, 1003))
    assert kind == "ndarray" and keys == m.keys(1000, 1003) and total == int(m.samples.size[1000:1003].sum())


# --- remote columns -----------------------------------------------------------------------------

@pytest.fixture
def column(pack):
    """The pack's sample_offset column (20,000 int64: 40 pages) as a RangedColumn over local storage, and the array."""
    storage = LocalStorage(str(pack))
    array = np.load(pack / "columns" / "sample_offset.npy")
    return RangedColumn(storage, "columns/sample_offset.npy", np.int64, len(array), 128), array, storage


def test_ranged_column_reads_only_the_pages_asked_for(column):
    ranged, array, storage = column
    assert ranged.pages_read == 0 and len(ranged) == len(array) and ranged.shape == array.shape
    assert ranged[5000] == array[5000] and ranged.pages_read == 1 and storage.reads == 1
    assert np.array_equal(ranged[5100:5700], array[5100:5700])  # pages 9 to 11: 10 and 11 in one read
    assert ranged.pages_read == 3 and storage.reads == 2
    assert np.array_equal(ranged[[0, 19_999, -1, 5001]], array[[0, 19_999, -1, 5001]])
    assert ranged.pages_read == 5 and storage.reads == 4
    assert storage.bytes_read == 5 * PAGE - (40 * PAGE - 20_000 * 8)  # the last page is short


@pytest.mark.parametrize("index", [7, -1, np.int64(3), slice(10, 30), slice(None, None, -7), slice(19_990, None, 3),
                                   slice(50, 10), [3, 3, -2], np.array([], dtype=np.int64), np.arange(0, 20_000, 999),
                                   "mask"])
def test_ranged_column_indexes_like_the_array(column, index):
    ranged, array, _ = column
    index = array % 7 == 0 if isinstance(index, str) else index
    got, want = ranged[index], array[index]
    assert type(got) is type(want) and np.array_equal(got, want)


def test_ranged_column_whole_column_operations(column):
    ranged, array, storage = column
    assert (ranged + 1 == array + 1).all() and (ranged == array).all()
    assert ranged.sum() == array.sum() and ranged.max() == array.max() and ranged.tolist() == array.tolist()
    assert np.array_equal(np.asarray(ranged), array) and list(ranged)[:3] == array[:3].tolist()
    assert ranged.pages_read == 40 and storage.reads == 1  # fetched once, in one read
    with pytest.raises(IndexError):
        ranged[20_000]
    with pytest.raises(TypeError, match="send its Manifest"):
        pickle.dumps(ranged)


@pytest.mark.slow
def test_remote_open_reads_the_table_then_one_row_group_per_block_on_demand(pack, http_root, monkeypatch):
    """A version-5 pack over HTTP: the open reads the head and blocks.bin; a block's first use reads its row group
    (every column and its keys) in one request, and the rows equal the local .npy columns."""
    monkeypatch.setattr(row_groups, "FETCH_BYTES", 1)  # this pack's groups (275 KB) would all come at once
    directory, base_url = http_root
    shutil.copytree(pack, directory / "lazy-pack", dirs_exist_ok=True)
    url = base_url.rstrip("/") + "/lazy-pack"
    m = open_manifest(url)
    grouped = [*m.samples.arrays.values(), m.key_offsets, m.key_blob]
    assert all(isinstance(c, GroupedColumn) for c in grouped) and not m.row_groups.filled.any()
    assert isinstance(m.blocks.first, np.ndarray)  # the block table is read whole
    start, stop = int(m.blocks.first[100]), int(m.blocks.first[100] + m.blocks.count[100])
    reads = m.row_groups.storage.reads
    m.validate_rows(start, stop)
    assert m.row_groups.storage.reads == reads + 1 and np.flatnonzero(m.row_groups.filled).tolist() == [100]
    assert m.keys(start, start + 2) == [f"k/{start:07d}", f"k/{start + 1:07d}"]
    assert m.row_groups.storage.reads == reads + 1
    copy = pickle.loads(pickle.dumps(m))
    assert copy.root == url and copy.keys(start, start + 1) == [f"k/{start:07d}"]
    local = open_manifest(pack)
    for name in local.samples.arrays:
        np.testing.assert_array_equal(m.samples.arrays[name], local.samples.arrays[name])
    np.testing.assert_array_equal(np.asarray(m.key_blob), np.asarray(local.key_blob))
    np.testing.assert_array_equal(np.asarray(m.key_offsets), np.asarray(local.key_offsets))


@pytest.mark.slow
def test_a_small_remote_pack_reads_all_its_row_groups_in_one_request(pack, http_root):
    directory, base_url = http_root
    shutil.copytree(pack, directory / "small-pack", dirs_exist_ok=True)
    m = open_manifest(base_url.rstrip("/") + "/small-pack")
    reads = m.row_groups.storage.reads
    m.validate_rows(0, 1)
    assert m.row_groups.storage.reads == reads + 1 and m.row_groups.filled.all()


@pytest.mark.slow
def test_a_remote_pack_before_version_5_still_reads_its_columns_page_by_page(http_root):
    directory, base_url = http_root
    data = Path(__file__).resolve().parents[1] / "data" / "v2-wds"
    shutil.copytree(data, directory / "v2-pack", dirs_exist_ok=True)
    m = open_manifest(base_url.rstrip("/") + "/v2-pack")
    ranged = [*m.samples.arrays.values(), m.key_offsets, m.key_blob]
    assert m.row_groups is None and all(isinstance(c, RangedColumn) and c.pages_read == 0 for c in ranged)
    m.validate_rows()
    local = open_manifest(data)
    assert m.keys() == local.keys()
    for name in local.samples.arrays:
        np.testing.assert_array_equal(m.samples.arrays[name], local.samples.arrays[name])


def test_a_reader_never_yields_a_sample_of_a_block_whose_rows_are_damaged(copy_pack):
    """A label outside the label index in block 2 does not stop the open; the reader raises the one-line
    ManifestError when it reaches block 2, after every sample of the blocks before it and none of block 2."""
    from corgi_io.reading import PieceReader
    from corgi_io.schedule import block_pieces, buffer_plan

    root = copy_pack("wds")
    path = root / "columns" / "sample_label.npy"
    labels = np.load(path)
    m = open_manifest(root)
    bad = int(m.blocks.first[2]) + 1
    labels[bad] = 99
    np.save(path, labels)
    m = open_manifest(root)
    plan = buffer_plan(block_pieces(np.arange(len(m.blocks)), m.blocks.first, m.blocks.count), shuffle="none",
                       buffer_pieces=1, seed=0, epoch=0, rank=0, worker=0, window_samples=1)
    got = []
    with pytest.raises(ManifestError) as info:
        got.extend(sample["index"] for sample in PieceReader(m, LocalStorage(str(root))).samples(plan))
    assert got == list(range(int(m.blocks.first[2])))
    assert str(info.value).startswith(f"{root}/columns: sample label outside") and "\n" not in str(info.value)


def test_kept_row_groups_are_checked_and_a_damaged_one_is_fetched_again(pack, tmp_path, monkeypatch):
    """A node's folder of row groups (`RowGroups.share`) is untrusted like the server: a kept group that fails
    its checks is fetched again, and the rows equal the columns."""
    from corgi_io.manifest.row_groups import RowGroups, read_table

    monkeypatch.setattr(row_groups, "FETCH_BYTES", 1)  # fetch only the blocks asked for
    m = open_manifest(pack)
    counts = {"samples": m.num_samples, "blocks": len(m.blocks.first), "key_bytes": len(m.key_blob),
              "rows_bytes": m.rows_bytes, "fields": len(m.field_rows)}

    def groups():
        storage = LocalStorage(str(pack))
        made = RowGroups(storage, read_table(storage, counts, m.version, "blocks.bin"), counts, m.version)
        made.share(str(tmp_path / "node"))
        return made, storage

    first, _ = groups()
    first.ensure(0, 3)
    kept = sorted(p.name for p in (tmp_path / "node").iterdir())
    assert kept == ["0.rows", "1.rows", "2.rows"]
    damaged = tmp_path / "node" / "1.rows"
    damaged.write_bytes(bytes(b ^ 0x5A for b in damaged.read_bytes()))
    second, storage = groups()
    reads, read_bytes = storage.reads, storage.bytes_read  # the block table's
    second.ensure(0, 3)
    assert (storage.reads - reads, storage.bytes_read - read_bytes) == (1, second.stored[1])  # the damaged one
    for name in ("label", "size", "offset"):
        np.testing.assert_array_equal(second.arrays[name][:int(m.blocks.first[3])],
                                      m.samples.arrays[name][:int(m.blocks.first[3])])

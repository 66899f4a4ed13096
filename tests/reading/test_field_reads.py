"""Field-only reads in the reader (issue 33 §2): `PieceReader(fields=...)` reads, for each piece, only the asked
fields' byte ranges (adjacent ones coalesced, one read per run), checks each field against its own checksum,
and yields the same samples in the same order as a whole read, holding only the asked fields.  The loader's
option and its checks are in tests/loaders/test_field_reads_loader.py."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from corgi_io.errors import CorruptDataError
from corgi_io.manifest import open_manifest
from corgi_io.reading import PieceReader
from corgi_io.reading.field_reads import GAP, coalesce
from corgi_io.schedule import block_pieces, buffer_plan
from corgi_io.storage import LocalStorage
from corgi_io.timing.stages import stage_index
from helpers.field_packs import captioned_pack
from helpers.packs import flip

STORAGE, VERIFY, SPLIT = map(stage_index, ("storage", "verify", "split"))


@pytest.fixture(scope="module", params=["wds", "tfrecord"])
def packed(request, tmp_path_factory):
    """(pack, {key: {field: bytes}}): 24 png + txt (+ json) samples in blocks of 6; read-only."""
    return captioned_pack(tmp_path_factory.mktemp(f"field-reads-{request.param}"), fmt=request.param)


def whole_plan(m, shuffle="corgipile"):
    pieces = block_pieces(np.arange(len(m.blocks)), m.blocks.first, m.blocks.count)
    return list(buffer_plan(pieces, shuffle=shuffle, buffer_pieces=2, seed=3))


class RecordedReads:
    """Every (path, offset, length) that `storage.read_range` is asked for (read_ranges goes through it)."""

    def __init__(self, storage):
        self.ranges, self._read = [], storage.read_range
        storage.read_range = self

    def __call__(self, path, offset, length):
        self.ranges.append((path, offset, length))
        return self._read(path, offset, length)


class RecordingClock:
    """The `clock.add` calls of the reading threads, by stage."""

    def __init__(self):
        self.adds = []

    def add(self, stage, seconds, nbytes=0, samples=0):
        self.adds.append((stage, nbytes, samples))

    def switch(self, stage):
        return stage

    def waited_on_storage(self, seconds):
        pass


def test_coalesce_merges_ranges_at_most_the_gap_apart():
    starts, lengths, run_of = coalesce(np.array([0, 100, 5000, 5010, 20000]), np.array([50, 10, 5, 0, 7]), gap=GAP)
    assert starts.tolist() == [0, 5000, 20000] and lengths.tolist() == [110, 10, 7]
    assert run_of.tolist() == [0, 0, 1, 1, 2]
    assert coalesce(np.array([0, 50 + GAP]), np.array([50, 1]))[0].tolist() == [0]         # exactly GAP apart: one
    assert coalesce(np.array([0, 51 + GAP]), np.array([50, 1]))[0].tolist() == [0, 51 + GAP]  # one byte more: two
    assert [a.tolist() for a in coalesce(np.zeros(0, np.int64), np.zeros(0, np.int64))] == [[], [], []]


@pytest.mark.parametrize("fields", [("txt",), ("json", "txt"), ("png",), ("txt", "png")])
def test_samples_hold_exactly_the_asked_fields_equal_to_their_source_files(packed, fields):
    root, expected = packed
    m = open_manifest(root)
    plan = whole_plan(m)
    whole = list(PieceReader(m, LocalStorage(root)).samples(plan))
    got = list(PieceReader(m, LocalStorage(root), fields=fields).samples(plan))
    assert [s["index"] for s in got] == [s["index"] for s in whole]  # the same samples, in the same order
    for sample, full in zip(got, whole):
        source = expected[sample["key"]]
        held = [name for name in full["fields"] if name in fields]  # record order
        assert sample["fields"] == held and {name: sample[name] for name in held} == {n: source[n] for n in held}
        assert not {"png", "txt", "json"} - set(fields) & set(sample)  # nothing unasked
        assert {k: sample[k] for k in ("index", "key", "label", "size")} == {k: full[k] for k in ("index", "key",
                                                                                                  "label", "size")}
        data = "png" if "png" in fields else next((f for f in fields if f in held), fields[0])
        assert sample["data"] == source.get(data, b"") and sample["ext"] == data
        assert sample["kind"] == {"png": "image", "txt": "text", "json": "text"}[data]
        if data in held:
            assert sample["data"] is sample[data]  # one object: a collate keeps it once


def test_only_the_asked_fields_bytes_are_read_one_read_per_run(packed):
    root, _ = packed
    m = open_manifest(root)
    storage = LocalStorage(root)
    reads = RecordedReads(storage)
    list(PieceReader(m, storage, fields=("txt", "json")).samples(whole_plan(m)))
    images, asked = m.field_ranges(fields=["png"]), m.field_ranges(fields=["txt", "json"])
    shard_of = np.asarray(m.samples.shard)
    paths = np.array([m.shards.path(int(shard)) for shard in shard_of[images.sample]])
    for path, offset, length in reads.ranges:  # no byte of an image
        assert not np.any((paths == path) & (images.offset < offset + length) & (offset < images.offset +
                                                                                 images.length))
    for sample, offset, length in zip(asked.sample.tolist(), asked.offset.tolist(), asked.length.tolist()):
        path = m.shards.path(int(shard_of[sample]))
        assert length == 0 or any(p == path and o <= offset and offset + length <= o + n for p, o, n in reads.ranges)
    # a sample's txt and json lie a tar header (or a few proto bytes) apart: one read for both; an image between
    # two samples is more than GAP bytes: a read each, and none for a sample whose asked fields are empty
    with_bytes = {s for s, n in zip(asked.sample.tolist(), asked.length.tolist()) if n}
    assert len(reads.ranges) == len(with_bytes) == storage.reads
    assert storage.bytes_read == sum(n for _, _, n in reads.ranges) < 0.05 * int(np.sum(m.blocks.length))


def test_field_reads_are_timed_as_storage_verify_and_split(packed):
    root, _ = packed
    m = open_manifest(root)
    clock, storage = RecordingClock(), LocalStorage(root)
    reader = PieceReader(m, storage, fields=("txt",), clock=clock)
    pieces = block_pieces(np.arange(len(m.blocks)), m.blocks.first, m.blocks.count)
    for piece in pieces:
        reader.piece_samples(piece)
    for stage in (STORAGE, VERIFY, SPLIT):
        adds = [add for add in clock.adds if add[0] == stage]
        assert len(adds) == len(pieces)  # one add per stage and piece
        assert sum(n for _, n, _ in adds) == storage.bytes_read and sum(s for *_, s in adds) == m.num_samples


def test_the_read_ahead_counts_a_piece_whole_until_it_is_split(packed):
    """Residency holds a field read's piece at its whole range (known without the field rows) and lets go of the
    same amount: at the end nothing is held, and the peak stays within the whole-read bound."""
    root, _ = packed
    m = open_manifest(root)
    reader = PieceReader(m, LocalStorage(root), prefetch_pieces=1, fields=("txt",))
    list(reader.samples(whole_plan(m)))
    assert reader.residency.reading == 0 and reader.residency.payloads == 0
    assert 0 < reader.peak_resident_bytes <= 3 * int(m.blocks.length.max())


def test_a_field_read_passes_by_the_piece_cache(packed):
    root, _ = packed
    m = open_manifest(root)
    assert PieceReader(m, LocalStorage(root), cache=object(), fields=("txt",)).cache is None


def damaged(packed, tmp_path, field: str):
    """A copy of the pack with one byte of the second sample's `field` flipped: (root, manifest, sample, offset)."""
    root = tmp_path / "pack"
    shutil.copytree(packed[0], root)
    m = open_manifest(root)
    r = m.field_ranges(1, 2, [field])
    sample, offset = int(r.sample[0]), int(r.offset[0])
    flip(root / m.shards.path(int(m.samples.shard[sample])), offset + int(r.length[0]) // 2)
    return root, m, sample, offset


def test_a_flipped_byte_in_an_asked_field_names_shard_offset_key_and_field(packed, tmp_path):
    root, m, sample, offset = damaged(packed, tmp_path, "txt")
    with pytest.raises(CorruptDataError) as info:
        list(PieceReader(m, LocalStorage(root), fields=("txt",)).samples(whole_plan(m, "none")))
    error, path = info.value, m.shards.path(int(m.samples.shard[sample]))
    assert (error.shard, error.offset, error.key) == (path, offset, m.key(sample))
    assert "\n" not in str(error) and f"byte offset {offset}" in str(error) and "field 'txt'" in str(error)
    assert str(root / path) in str(error)
    unchecked = list(PieceReader(m, LocalStorage(root), fields=("txt",), verify=False).samples(whole_plan(m, "none")))
    assert len(unchecked) == m.num_samples  # verify=False: no checksum computed


def test_a_flipped_byte_in_a_field_not_asked_does_not_matter(packed, tmp_path):
    root, m, _, _ = damaged(packed, tmp_path, "png")
    got = list(PieceReader(m, LocalStorage(root), fields=("txt", "json")).samples(whole_plan(m)))
    assert all(packed[1][s["key"]]["txt"] == s["txt"] for s in got) and len(got) == m.num_samples
    with pytest.raises(CorruptDataError):  # a whole read checks the image
        list(PieceReader(m, LocalStorage(root)).samples(whole_plan(m)))

"""The loader's verify stage on its own: a piece anywhere inside a block is checked with its running
checksum, and a damaged one is located at its first bad record; version-1 packs are checked per record."""
from __future__ import annotations

from pathlib import Path

import pytest

from corgi_io import CorruptDataError
from corgi_io.manifest import open_manifest
from corgi_io import PackOptions, pack
from corgi_io.reading.read_checks import PieceVerifier
from corgi_io.storage import LocalStorage
from helpers.corpus_factory import write_text
from helpers.packs import piece_bytes


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    source = tmp_path_factory.mktemp("checks-corpus")
    for i in range(12):
        write_text(source / f"t{i:02d}.txt", 5 + 7 * i, seed=i)
    root = tmp_path_factory.mktemp("checks") / "pack"
    pack(source, root, PackOptions(block_samples=6, order="keep"), progress=False)
    return root




def every_piece(m):
    """(block, start, stop) of every contiguous run of samples inside each block."""
    for block, (first, count) in enumerate(zip(m.blocks.first.tolist(), m.blocks.count.tolist())):
        for start in range(first, first + count):
            for stop in range(start + 1, first + count + 1):
                yield block, start, stop


@pytest.mark.parametrize("root", ["v2", "v1"])
def test_every_piece_of_an_intact_pack_passes(packed, root):
    root = packed if root == "v2" else Path(__file__).parents[1] / "data" / "v1-wds"
    m = open_manifest(root)
    verifier = PieceVerifier(m, LocalStorage(root))
    pieces = list(every_piece(m))
    assert len(pieces) > len(m.blocks)
    for block, start, stop in pieces:
        verifier.check_piece((block, start, stop), piece_bytes(m, root, start, stop))


def test_a_damaged_piece_names_its_first_bad_record(packed):
    m = open_manifest(packed)
    verifier = PieceVerifier(m, LocalStorage(packed))
    for block, start, stop in every_piece(m):
        for bad in range(start, stop):
            data = bytearray(piece_bytes(m, packed, start, stop))
            at = int(m.samples.offset[bad] - m.samples.offset[start]) + 100  # inside bad's tar header or payload
            data[at] ^= 0x40
            with pytest.raises(CorruptDataError) as info:
                verifier.check_piece((block, start, stop), bytes(data))
            assert info.value.key == m.key(bad) and info.value.offset == int(m.samples.offset[bad])

"""Image-caption packs for the field-only read tests (issue 33 §2): PNGs larger than the reader's coalescing gap
(so that a caption-only read cannot merge a caption with its neighbours' images), a caption each (one of them
empty), a json on every third sample (or none), two classes."""
from __future__ import annotations

import json
from pathlib import Path

from corgi_io.packing import PackOptions, pack
from corgi_io.reading.field_reads import GAP
from helpers.corpus_factory import write_image


def captioned_corpus(root: Path, n: int, json_too: bool = True) -> dict:
    """Write `n` samples under `root` (png + txt, json on every third with `json_too`); {key: {field: bytes}}."""
    expected = {}
    for i in range(n):
        stem = root / f"c{i % 2}" / f"s{i:03d}"
        write_image(stem.with_suffix(".png"), 64, 64, seed=10 + i)
        stem.with_suffix(".txt").write_text("" if i == 5 else f"caption {i} " * (1 + i % 4))
        if json_too and i % 3 == 0:
            stem.with_suffix(".json").write_text(json.dumps({"i": i}))
        expected[f"c{i % 2}/s{i:03d}"] = {p.suffix[1:]: p.read_bytes() for p in stem.parent.glob(f"s{i:03d}.*")}
    assert min(len(fields["png"]) for fields in expected.values()) > GAP
    return expected


def captioned_pack(root: Path, n: int = 24, fmt: str = "wds", block_samples: int = 6, json_too: bool = True) -> tuple:
    """(pack folder, {key: {field: bytes}}) of `captioned_corpus`, in blocks of `block_samples`, a few shards."""
    expected = captioned_corpus(root / "src", n, json_too)
    pack(root / "src", root / "pack", PackOptions(format=fmt, block_samples=block_samples, shard_bytes=80_000),
         workers=1, progress=False)
    return root / "pack", expected

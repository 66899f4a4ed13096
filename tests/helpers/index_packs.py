"""A small image-caption pack with the keys that trouble other readers' indexes, and what each sample must hold:
a dotted stem (escaped `IMG_0000%2Ev2`), a key with a space, a key past 100 bytes (a pax header), a non-ASCII key,
a json on some samples; labeled (cat 0, dog 1), in blocks of 3 over several shards."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

from helpers.corpus_factory import write_image

from corgi_io.packing import PackOptions, pack

SPACED_KEY = "dog/a b"
LONG_KEY = "dog/" + "l" * 120


def captioned_source(root: Path, long_key: bool = True) -> dict:
    """Write the corpus under `root` (LONG_KEY's sample only with `long_key`); {corgi key: {field: bytes}} of every
    sample, `cls` included."""
    stems = {f"{('cat', 'dog')[i % 2]}/{i:03d}": f"{('cat', 'dog')[i % 2]}/{i:03d}" for i in range(12)}
    stems.update({"cat/IMG_0000%2Ev2": "cat/IMG_0000.v2", SPACED_KEY: SPACED_KEY, "cat/café": "cat/café",
                  **({LONG_KEY: LONG_KEY} if long_key else {})})
    expected = {}
    for i, (key, stem) in enumerate(stems.items()):
        image = root / f"{stem}.jpg"
        write_image(image, 8 + i % 7, 6 + i % 3, seed=i)
        fields = {"jpg": image.read_bytes(), "txt": f"a picture number {i}".encode()}
        (root / f"{stem}.txt").write_bytes(fields["txt"])
        if i % 3 == 0:
            fields["json"] = json.dumps({"i": i}).encode()
            (root / f"{stem}.json").write_bytes(fields["json"])
        fields["cls"] = b"0" if stem.startswith("cat/") else b"1"
        expected[key] = fields
    return expected


def captioned_pack(root: Path, long_key: bool = True) -> tuple:
    """(pack folder, {key: {field: bytes}}): `captioned_source` under root/src packed into root/pack."""
    expected = captioned_source(root / "src", long_key)
    pack(root / "src", root / "pack", PackOptions(block_samples=3, shard_bytes=12 * 1024), workers=1, progress=False)
    return root / "pack", expected


def tar_members(shard: Path) -> list:
    """[(member name, data offset, size)] of every regular file of a tar, read whole by `tarfile` on its own."""
    with tarfile.open(shard) as archive:
        return [(member.name, member.offset_data, member.size) for member in archive if member.isreg()]

"""Existing WebDataset tars to pack, and what stock webdataset reads back from a pack."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import webdataset as wds
from PIL import Image


def jpeg(width: int, height: int, value: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), value, np.uint8)).save(out, "JPEG")
    return out.getvalue()


def write_tars(folder: Path, tars: int = 3, per_tar: int = 6) -> dict:
    """`tars` tars written by webdataset.TarWriter of jpg+txt(+cls on even samples); returns {key: sample dict}."""
    folder.mkdir(parents=True, exist_ok=True)
    samples = {}
    for t in range(tars):
        with wds.TarWriter(str(folder / f"part-{t:03d}.tar")) as writer:
            for i in range(per_tar):
                key = f"{t:02d}{i:04d}"
                sample = {"__key__": key, "jpg": jpeg(16 + i, 12 + t, 10 * i), "txt": f"caption {t} {i}".encode()}
                if i % 2 == 0:
                    sample["cls"] = str(i).encode()
                writer.write(sample)
                samples[key] = sample
    return samples


def pack_args(source, out, *extra):
    return ["pack", str(source), str(out), "--block-samples", "2", "--shard-bytes", "16k", *map(str, extra)]


def stock_samples(out: Path) -> dict:
    """{key: {field: bytes}} as stock webdataset reads the pack's tars."""
    shards = sorted(str(path) for path in out.glob("shard-*.tar"))
    return {sample["__key__"]: {name: value for name, value in sample.items() if not name.startswith("__")}
            for sample in wds.WebDataset(shards, shardshuffle=False)}


def text_tar(path, n: int) -> None:
    """A WebDataset tar of `n` samples, each one 10-byte text (start-up request counts, issue 31)."""
    with tarfile.open(path, "w") as tar:
        for i in range(n):
            data = f"text {i:07d}"[:10].encode()
            info = tarfile.TarInfo(f"s{i:07d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

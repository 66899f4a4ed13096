"""Packs and shard bytes the tests share: a small image pack, a pack of texts, synthetic manifests, flipped bytes, files of a pack,
a block's bytes."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from corgi_io.manifest import save_manifest
from corgi_io.packing import PackOptions, pack
from helpers.corpus_factory import make_image_corpus, write_text

BLOCK, SHARD_BLOCKS = 64, 4  # the synthetic pack's samples per block and blocks per shard


def small_image_pack(root: Path) -> Path:
    """root/pack: 30 small images in blocks of 4 over 5 shards (root/corpus is its source), for remote stores."""
    make_image_corpus(root / "corpus", 30, long_tail=False)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=4, shard_bytes=40_000), workers=1, progress=False)
    return root / "pack"


def image_pack(tmp_path_factory, name: str, n: int, block_samples: int = 4) -> Path:
    """A pack of `n` small JPEGs and PNGs (`make_image_corpus`, no long tail) in blocks of `block_samples`, made
    under fresh temporary folders named after `name`."""
    source = tmp_path_factory.mktemp(f"{name}-corpus")
    make_image_corpus(source, n, long_tail=False)
    root = tmp_path_factory.mktemp(name) / "pack"
    pack(source, root, PackOptions(block_samples=block_samples), progress=False)
    return root


def text_pack(tmp_path_factory, name: str, lengths, classes: int = 2, stem: str = "t", block_samples: int = 8) -> Path:
    """A pack of texts, sample i of `lengths[i]` words in folder ``c{i % classes}`` as ``{stem}{i:03d}.txt``, in
    blocks of `block_samples`, made under fresh temporary folders named after `name`."""
    source = tmp_path_factory.mktemp(f"{name}-corpus")
    for i, n in enumerate(lengths):
        write_text(source / f"c{i % classes}" / f"{stem}{i:03d}.txt", int(n), seed=i)
    root = tmp_path_factory.mktemp(name) / "pack"
    pack(source, root, PackOptions(block_samples=block_samples), progress=False)
    return root


def token_pack(tmp_path_factory, name: str, lengths, block_samples: int = 8, drop_text: bool = True) -> Path:
    """A pack of tokenised texts: `text_pack`'s texts (sample i of `lengths[i]` words), tokenised at pack time
    (tokens.npy the primary field, its size the token count) by a word-level tokenizer trained here on them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    source = tmp_path_factory.mktemp(f"{name}-corpus")
    files = [str(source / "c0" / f"t{i:04d}.txt") for i in range(len(lengths))]
    for path, (i, n) in zip(files, enumerate(lengths)):
        write_text(path, int(n), seed=i)
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train(files, trainers.WordLevelTrainer(special_tokens=["[UNK]"], show_progress=False))
    tokenizer_file = tmp_path_factory.mktemp(f"{name}-tokenizer") / "tokenizer.json"
    tokenizer.save(str(tokenizer_file))
    root = tmp_path_factory.mktemp(name) / "pack"
    pack(source, root, PackOptions(block_samples=block_samples, tokenizer=str(tokenizer_file), drop_text=drop_text),
         progress=False)
    return root


def synthetic_pack(root, n: int) -> None:
    """A consistent pack of `n` samples (no shard files: nothing here reads them), blocks of 64, 4 per shard."""
    i = np.arange(n, dtype=np.int64)
    shard_samples = BLOCK * SHARD_BLOCKS
    length = 1024 + 512 * (i % 5)
    within = i % shard_samples
    start = np.cumsum(length) - length
    offset = start - start[i - within]  # records back to back from byte 0 of each shard
    samples = {"label": i % 3, "kind": np.zeros(n), "ext": np.zeros(n), "bytes": length - 600, "size": 1 + i % 97,
               "shard": i // shard_samples, "offset": offset, "length": length, "data_offset": offset + 512,
               "checksum": i * 7 % 2 ** 32, "fields": np.ones(n)}
    first = np.arange(0, n, BLOCK)
    count = np.minimum(BLOCK, n - first)
    last = first + count - 1
    blocks = {"shard": first // shard_samples, "offset": offset[first], "length": offset[last] + length[last] - offset[first],
              "first": first, "count": count, "size_sum": np.add.reduceat(samples["size"], first)}
    shard_first = np.arange(0, n, shard_samples)
    shard_last = np.minimum(shard_first + shard_samples, n) - 1
    shards = [{"path": f"shard-{k:06d}.tar", "bytes": int(offset[b] + length[b]) + 1024, "first_sample": int(a),
               "samples": int(b - a + 1)} for k, (a, b) in enumerate(zip(shard_first, shard_last))]
    head = {"format": "wds", "options": {}, "labels": ["a", "b", "c"], "extensions": ["txt"], "fields": ["txt"],
            "max_fields": 1, "checksum": "crc32c",
            "shards": shards, "skipped": []}
    fields = {"start": np.arange(n + 1), "id": np.zeros(n), "framing": np.full(n, 512), "offset": offset + 512,
              "length": length - 600, "crc": samples["checksum"]}  # one field per sample: its payload
    save_manifest(root, head, samples, blocks, [f"k/{j:07d}" for j in range(n)], fields)


def flip(path: Path, position: int, mask: int = 0x5A) -> None:
    """XOR the byte at `position` of the file at `path` with `mask` (damage that any checksum sees)."""
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ mask]))


def all_files(folder: Path) -> dict:
    """{relative path: bytes} of every file under `folder`, hidden ones included."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def piece_bytes(m, root: Path, start: int, stop: int) -> bytes:
    """The shard bytes of samples [start, stop) of the manifest `m` of the pack at `root` (one shard)."""
    s = m.samples
    shard = (root / m.shards[int(s.shard[start])].path).read_bytes()
    return shard[int(s.offset[start]):int(s.offset[stop - 1] + s.length[stop - 1])]


def resync_row_groups(root: Path) -> None:
    """Rewrite a version-5 pack's row groups (columns/rows.bin, blocks.bin) and the head's rows_bytes from its
    .npy columns, after a test edited those: the pack then says the edited rows everywhere."""
    import json

    from corgi_io.manifest.row_group_writer import write_row_groups

    head_path = Path(root) / "manifest.json"
    head = json.loads(head_path.read_text())
    head["counts"]["rows_bytes"] = write_row_groups(root, head["counts"]["blocks"])
    head_path.write_text(json.dumps(head))


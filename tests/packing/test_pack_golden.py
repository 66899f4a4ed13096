"""Golden digests of packs (issue 30 §1): the bytes `pack` writes over every SOURCE form and option family, pinned.

Each case builds a tiny deterministic corpus under ``root/source`` and packs it in-process into ``root/pack``;
its digests (shards, columns, manifest) must equal those in tests/data/pack_golden.json.  Any change in what a
pack holds shows here: a refactor of the pack pipelines must leave every digest as it is.

The manifest is hashed without what changes from run to run: ``created``, ``options.source`` (an absolute
path) and ``options.corpus`` (it covers the files' modification times); other mentions of the case's
temporary folder (the tokenizer's path) read ``<root>``.  Shard files and columns are hashed as written
(skip records name their inputs relative to SOURCE, whatever its form).

The digests also depend on the encoders the corpora are made with (Pillow's JPEG/PNG, OpenCV's MJPG, zlib,
the tokenizers library).  To regenerate them, deliberately and only when a change of the bytes is intended
(or the environment changed those encoders), run on the code whose output is the reference::

    CORGI_UPDATE_GOLDEN=1 python -m pytest -q tests/packing/test_pack_golden.py

and commit tests/data/pack_golden.json with a message that says why the bytes changed.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import pytest

from corgi_io.packing import PackOptions, pack
from helpers.corpus_factory import make_image_corpus, write_image, write_text, write_video
from helpers.source_shards import jpeg, write_tars

GOLDEN = Path(__file__).parent.parent / "data" / "pack_golden.json"
UPDATE = os.environ.get("CORGI_UPDATE_GOLDEN") == "1"
SMALL = {"block_samples": 3, "shard_bytes": 24_000}  # several blocks and shards even for tiny corpora


def images(source: Path) -> None:
    """Twelve small JPEGs and PNGs over three classes."""
    make_image_corpus(source, 12, long_tail=False)


def mixed(source: Path) -> None:
    """Images, texts and two short videos over two classes, some images with a caption (two-field samples),
    a large image (for the pixel and size bounds), a byte-identical copy (for --dedup) and a long unicode name."""
    for c, label in enumerate(("cat", "dog")):
        for i in range(3):
            name = f"img{i}.{'png' if i == 2 else 'jpg'}"
            write_image(source / label / name, 20 + 6 * i, 18 + 4 * c, seed=10 * c + i)
            write_text(source / label / f"doc{i}.txt", 3 + 5 * i, seed=10 * c + i)
            if i != 1:
                write_text(source / label / f"img{i}.txt", 2 + i, seed=100 + i)
        write_video(source / label / f"clip{c}.avi", 2 + c, width=32, height=24)
    write_image(source / "dog" / "big.jpg", 120, 90, seed=7)
    write_image(source / "cat" / "deep" / f"fête {'long' * 30}.PNG", 12, 10, seed=8)  # a name that needs pax headers
    (source / "cat" / "copy.jpg").write_bytes((source / "dog" / "img0.jpg").read_bytes())


def listing_csv(source: Path) -> None:
    """A CSV listing of `images`' files in reverse order with string labels, one row keyed."""
    _listing(source, "listing.csv")


def listing_jsonl(source: Path) -> None:
    """The same listing as JSON lines."""
    _listing(source, "listing.jsonl")


def _listing(source: Path, name: str) -> None:
    files = sorted(make_image_corpus(source / "files", 9, long_tail=False))[::-1]
    rows = [{"path": f"files/{rel}", "label": rel.split("/")[0], **({"key": "chosen/one"} if i == 2 else {})}
            for i, rel in enumerate(files)]
    if name.endswith(".csv"):
        with open(source / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["path", "label", "key"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        (source / name).write_text("".join(json.dumps(row) + "\n" for row in rows))


def tars(source: Path) -> None:
    """WebDataset tars written by webdataset.TarWriter: two of jpg+txt(+cls on even samples), one of copies of the
    first's first samples (for --dedup), one whose samples also have an integer field idx (for --label-field)."""
    import webdataset as wds

    write_tars(source, tars=3, per_tar=4)
    (source / "part-001.tar").unlink()
    write_tars(source / "dup", tars=1, per_tar=2)
    (source / "dup" / "part-000.tar").rename(source / "part-001.tar")
    (source / "dup").rmdir()
    with wds.TarWriter(str(source / "part-003.tar")) as writer:
        for i in range(3):
            writer.write({"__key__": f"idx{i}", "jpg": jpeg(10, 10 + i, 40 * i), "idx": str(2 * i).encode()})


def tfrecords(source: Path) -> None:
    """Two TFRecord files of tf.train.Example: an image, a text and a label each."""
    from tfrecord import TFRecordWriter

    source.mkdir(parents=True)
    for f in range(2):
        writer = TFRecordWriter(str(source / f"train-{f}.tfrecord"))
        for i in range(5):
            writer.write({"image/encoded": (jpeg(16 + i, 12 + f, 20 * i + f), "byte"),
                          "image/text": (f"text {f} {i}".encode(), "byte"), "image/class/label": (i % 3, "int")})
        writer.close()


def parquet(source: Path) -> None:
    """A Parquet table of image structs, captions and labels, in row groups of three."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source.mkdir(parents=True)
    pq.write_table(pa.table({"image": [{"bytes": jpeg(8 + i, 8, 25 * i)} for i in range(8)],
                             "caption": [f"row {i} " * (i + 1) for i in range(8)], "label": [i % 2 for i in range(8)]}),
                   source / "t.parquet", row_group_size=3)


def jsonl(source: Path) -> None:
    """A JSONL table of inline texts (`--from jsonl`)."""
    source.mkdir(parents=True)
    (source / "rows.jsonl").write_text("".join(json.dumps({"id": f"doc{i}", "text": "the cat sat " * (i + 1)}) + "\n"
                                               for i in range(7)))


def texts(source: Path) -> None:
    """Nine texts of 2..26 words over three classes."""
    for i in range(9):
        write_text(source / f"c{i % 3}" / f"t{i:02d}.txt", 2 + 3 * i, seed=i)


MAP_MODULE = '''
def shout(fields, key):
    """Upper-case the caption, add a field, and leave out every sample whose key ends in 1."""
    if key.endswith("1"):
        return None
    out = dict(fields)
    if "txt" in out:
        out["txt"] = out["txt"].upper()
    out["json"] = ('{"key": "%s"}' % key).encode()
    return out
'''

FEATURES = (("jpg", "image/encoded"), ("txt", "image/text"), ("label", "image/class/label"))
COLUMNS = (("jpg", "image.bytes"), ("txt", "caption"), ("label", "label"))
RESIZE = {"image_max_side": 16}

# name: (corpus maker, SOURCE under root/source ("" for the folder itself), PackOptions keywords)
CASES = {
    "folder": (images, "", {}),
    "folder-small-blocks": (images, "", SMALL),
    "folder-keep": (images, "", {"order": "keep", **SMALL}),
    "folder-shuffle-seed": (images, "", {"order": "shuffle", "seed": 7, **SMALL}),
    "folder-tfrecord": (images, "", {"format": "tfrecord", **SMALL}),
    "folder-labels": (images, "", {"label_index": ("dog", "bird", "cat", "fox")}),
    "folder-resize": (images, "", RESIZE),
    "folder-resize-jpeg": (images, "", {**RESIZE, "image_format": "jpeg", "image_quality": 60}),
    "folder-resize-webp": (images, "", {**RESIZE, "image_format": "webp", "image_quality": 50}),
    "mixed": (mixed, "", {}),
    "mixed-kind-text": (mixed, "", {"kind": "text"}),
    "mixed-kind-video": (mixed, "", {"kind": "video"}),
    "mixed-require": (mixed, "", {"require": ("jpg", "txt")}),
    "mixed-primary-txt": (mixed, "", {"primary": "txt"}),
    "mixed-size-bounds": (mixed, "", {"kind": "image", "min_size": 500, "max_size": 2_000}),
    "mixed-max-pixels": (mixed, "", {"max_pixels": 1_500}),
    "mixed-max-bytes": (mixed, "", {"max_sample_bytes": 1_200}),
    "mixed-dedup": (mixed, "", {"dedup": True}),
    "mixed-map": (mixed, "", {"map_function": "golden_map:shout"}),
    "texts-tokenizer": (texts, "", {"tokenizer": "<tokenizer>"}),
    "texts-tokenizer-drop": (texts, "", {"tokenizer": "<tokenizer>", "drop_text": True, "min_size": 5}),
    "listing-csv": (listing_csv, "listing.csv", {"order": "keep"}),
    "listing-jsonl": (listing_jsonl, "listing.jsonl", SMALL),
    "listing-labels": (listing_csv, "listing.csv", {"label_index": ("dog", "cat", "bird")}),
    "wds": (tars, "", {}),
    "wds-small-blocks": (tars, "", SMALL),
    "wds-keep": (tars, "", {"order": "keep", "block_samples": 2}),
    "wds-tfrecord": (tars, "", {"format": "tfrecord"}),
    "wds-require-txt": (tars, "", {"require": ("txt",)}),
    "wds-label-field": (tars, "", {"label_field": "idx", "max_sample_bytes": 700}),
    "wds-resize": (tars, "", {**RESIZE, "image_format": "jpeg"}),
    "wds-dedup": (tars, "", {"dedup": True}),
    "wds-map": (tars, "", {"map_function": "golden_map:shout"}),
    "wds-primary-txt": (tars, "", {"primary": "txt"}),
    "wds-size-bounds": (tars, "", {"min_size": 220, "max_size": 300}),
    "tfrecord": (tfrecords, "", {"source_fields": FEATURES, **SMALL}),
    "tfrecord-to-tfrecord": (tfrecords, "", {"source_fields": FEATURES, "format": "tfrecord"}),
    "parquet": (parquet, "", {"source_fields": COLUMNS}),
    "parquet-keep-resize": (parquet, "", {"source_fields": COLUMNS, "order": "keep", "image_max_side": 6}),
    "jsonl-tokenizer": (jsonl, "rows.jsonl", {"source_form": "jsonl", "source_fields": (("key", "id"), ("txt", "text")),
                                              "tokenizer": "<tokenizer>"}),
}


def train_tokenizer(path: Path) -> str:
    """A word-level tokenizer trained here, offline and deterministically, on a fixed vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["corgi shard pile fête naïve data block shuffle rank café", "the cat sat"],
                                  trainers.WordLevelTrainer(special_tokens=["[UNK]"], show_progress=False))
    tokenizer.save(str(path))
    return str(path)


def make_pack(root: Path, case: str, workers: int = 1) -> Path:
    """Build the corpus of `case` under root/source and pack it into root/pack; returns root/pack."""
    maker, name, keywords = CASES[case]
    maker(root / "source")
    if keywords.get("tokenizer") == "<tokenizer>":
        keywords = dict(keywords, tokenizer=train_tokenizer(root / "tokenizer.json"))
    pack(root / "source" / name, root / "pack", PackOptions(**keywords), workers=workers, progress=False)
    return root / "pack"


def digests(root: Path) -> dict:
    """{"shards", "columns", "manifest"}: SHA-256 digests of the pack at root/pack (see the module docstring)."""
    folder = root / "pack"
    files = sorted(path for path in folder.rglob("*") if path.is_file() and path.name != "manifest.json")
    out = {}
    for part, chosen in (("shards", [p for p in files if p.parent == folder]),
                         ("columns", [p for p in files if p.parent != folder])):
        digest = hashlib.sha256()
        for path in chosen:
            data = path.read_bytes()
            digest.update(f"{path.relative_to(folder).as_posix()}\0{len(data)}\0".encode() + data)
        out[part] = digest.hexdigest()
    out["manifest"] = hashlib.sha256(stable_manifest(folder / "manifest.json", root).encode()).hexdigest()
    return out


def stable_manifest(path: Path, root: Path) -> str:
    """The manifest's JSON less its volatile fields, the case's temporary folder written ``<root>``."""
    head = json.loads(path.read_text())
    head.pop("created")
    head["options"].pop("source")
    head["options"].pop("corpus")
    return rooted(json.dumps(head, sort_keys=True), root)


def rooted(text: str, root: Path) -> str:
    """`text` with the case's temporary folder written ``<root>``."""
    return text.replace(str(root.resolve()), "<root>").replace(str(root), "<root>")


@pytest.fixture
def golden_map(write_user_module):
    write_user_module("golden_map", MAP_MODULE)


@pytest.mark.parametrize("case", sorted(CASES))
def test_pack_bytes_match_the_golden_digests(tmp_path, case, golden_map):
    got = digests(make_pack(tmp_path, case).parent)
    if UPDATE:
        recorded = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        GOLDEN.write_text(json.dumps({**recorded, case: got}, indent=1, sort_keys=True) + "\n")
        return
    expected = json.loads(GOLDEN.read_text()).get(case)
    assert expected is not None, f"no golden digests for {case!r}: CORGI_UPDATE_GOLDEN=1 (see the module docstring)"
    changed = [part for part in expected if got[part] != expected[part]]
    assert not changed, f"{case}: the pack's {', '.join(changed)} changed"


def test_every_golden_case_is_a_case():
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(CASES)


@pytest.mark.parametrize("case", ["folder-small-blocks", "wds-small-blocks", "mixed-dedup"])
def test_two_workers_write_the_bytes_of_one(tmp_path, case):
    assert digests(make_pack(tmp_path / "w2", case, workers=2).parent) == json.loads(GOLDEN.read_text())[case]


@pytest.mark.parametrize("case", ["mixed", "wds", "listing-csv", "texts-tokenizer"])
def test_the_digests_do_not_depend_on_the_folder(tmp_path, case):
    here, elsewhere = tmp_path / "a", tmp_path / "elsewhere" / "b"
    assert digests(make_pack(here, case).parent) == digests(make_pack(elsewhere, case).parent)

"""`corgi pack --image-max-side/--image-quality/--min-size/--max-size`: preprocessing in the shard tasks.

Real packs of a folder of JPEGs with captions, read back with stock webdataset and tfrecord, the
manifest and the loader; the options are in the pack's identity; a resumed pack is byte-identical.
"""
from __future__ import annotations

import io
from pathlib import Path

import pytest
import webdataset
from click.testing import CliRunner
from PIL import Image
from tfrecord.reader import tfrecord_loader

from corgi_io.cli import main
from corgi_io.errors import PackError
from corgi_io.manifest import open_manifest
from corgi_io.packing import PackOptions, pack, pipeline
from helpers.corpus_factory import write_image

SIDE = 64
SIZES = {"big/a": (200, 100), "big/b": (90, 160), "small/c": (64, 40), "small/d": (30, 30)}  # key -> (w, h)
CAPTIONS = {key: ("a picture" + " of it" * n).encode() for n, key in enumerate(SIZES)}  # 2, 4, 6, 8 words


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """JPEGs, some larger than SIDE and some not, each with a .txt caption (two fields per sample)."""
    root = tmp_path_factory.mktemp("captioned")
    for key, (width, height) in SIZES.items():
        write_image(root / f"{key}.jpg", width, height)
        (root / f"{key}.txt").write_bytes(CAPTIONS[key])
    return root


def run_pack(source: Path, out: Path, *args: str):
    """`corgi pack` in this process; the click result."""
    return CliRunner().invoke(main, ["pack", str(source), str(out), "--workers", "1", "--order", "keep", *args])


def stock_wds(out: Path) -> dict:
    """{key: {field: bytes}} through stock webdataset."""
    urls = sorted(str(path) for path in out.glob("shard-*.tar"))
    return {sample["__key__"]: {name: value for name, value in sample.items() if not name.startswith("__")}
            for sample in webdataset.WebDataset(urls, shardshuffle=False)}


def stock_tfrecord(out: Path) -> dict:
    """{key: {feature: bytes or int}} through stock tfrecord (no index: every record, in order)."""
    description = {"key": "byte", "data": "byte", "ext": "byte", "txt": "byte", "size": "int"}
    samples = {}
    for path in sorted(out.glob("shard-*.tfrecord")):
        for record in tfrecord_loader(str(path), None, description):
            samples[bytes(record["key"]).decode()] = record
    return samples


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_large_images_resized_small_ones_byte_identical(corpus, tmp_path, fmt):
    result = run_pack(corpus, tmp_path / "out", "--format", fmt, "--image-max-side", str(SIDE))
    assert result.exit_code == 0, result.output
    manifest = open_manifest(tmp_path / "out")
    assert manifest.num_samples == len(SIZES) and not list(manifest.skip_records())
    if fmt == "wds":
        images = {key: (fields["jpg"], fields["txt"]) for key, fields in stock_wds(tmp_path / "out").items()}
    else:
        images = {key: (bytes(rec["data"]), bytes(rec["txt"])) for key, rec in stock_tfrecord(tmp_path / "out").items()}
    sizes = dict(zip(manifest.keys(), manifest.samples.size.tolist()))
    for key, (width, height) in SIZES.items():
        data, caption = images[key]
        assert caption == CAPTIONS[key]
        if max(width, height) <= SIDE:
            assert data == (corpus / f"{key}.jpg").read_bytes()
            assert sizes[key] == width * height
            continue
        new = Image.open(io.BytesIO(data)).size
        assert max(new) == SIDE and abs(new[0] / new[1] - width / height) < 0.05
        assert sizes[key] == new[0] * new[1]


def test_options_recorded_and_other_options_refused(corpus, tmp_path):
    out = tmp_path / "out"
    assert run_pack(corpus, out, "--image-max-side", str(SIDE), "--image-quality", "80").exit_code == 0
    options = open_manifest(out).options
    assert options["image_max_side"] == SIDE and options["image_quality"] == 80
    assert options["transforms"] == [{"name": "resize", "max_side": SIDE, "format": "keep", "quality": 80,
                                      "max_pixels": options["max_pixels"]}]
    again = run_pack(corpus, out, "--image-max-side", "32")
    assert again.exit_code != 0 and "image_max_side" in again.output and "--overwrite" in again.output
    assert run_pack(corpus, out, "--image-max-side", "32", "--overwrite").exit_code == 0


def test_min_and_max_size_skip_with_a_reason(corpus, tmp_path):
    result = run_pack(corpus, tmp_path / "out", "--image-max-side", str(SIDE), "--min-size", "1000",
                      "--max-size", "3000")
    assert result.exit_code == 0, result.output
    manifest = open_manifest(tmp_path / "out")
    kept = {key for key, (width, height) in SIZES.items() if 1000 <= round_area(width, height) <= 3000}
    assert kept == {"big/a", "big/b", "small/c"}  # big/a kept: 20,000 pixels before the resize, 2,048 after
    assert set(manifest.keys()) == kept
    skipped = {entry["path"]: entry["reason"] for entry in list(manifest.skip_records())}
    assert set(skipped) == {f"{key}.{ext}" for key in set(SIZES) - kept for ext in ("jpg", "txt")}
    assert "small/d.jpg" in skipped and "1,000" in skipped["small/d.jpg"]


def round_area(width: int, height: int) -> int:
    """The pixels of a (width, height) image after the resize to SIDE."""
    longer = max(width, height)
    if longer <= SIDE:
        return width * height
    return max(1, round(width * SIDE / longer)) * max(1, round(height * SIDE / longer))


@pytest.mark.parametrize("args, message", [(["--min-size", "9", "--max-size", "3"], "at most max_size"),
                                           (["--image-max-side", "8", "--size-fn", "os.path:getsize"], "--size-fn")])
def test_bad_options_refused_before_any_work(corpus, tmp_path, args, message):
    result = run_pack(corpus, tmp_path / "out", *args)
    assert result.exit_code != 0 and message in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_resumed_resized_pack_is_byte_identical(corpus, tmp_path, monkeypatch):
    options = PackOptions(image_max_side=SIDE, order="keep", block_samples=1, shard_bytes=1, block_bytes=1)
    pack(corpus, tmp_path / "whole", options, progress=False)
    write_unit, written = pipeline.write_unit, []

    def fail_after_first(task):  # a crash once one shard is finished: its record stays in .corgi-partial/
        if written:
            raise KeyboardInterrupt
        written.append(task.index)
        return write_unit(task)

    monkeypatch.setattr(pipeline, "write_unit", fail_after_first)
    with pytest.raises(KeyboardInterrupt):
        pack(corpus, tmp_path / "resumed", options, progress=False)
    monkeypatch.setattr(pipeline, "write_unit", write_unit)
    pack(corpus, tmp_path / "resumed", options, progress=False)
    names = sorted(path.name for path in (tmp_path / "whole").iterdir())
    assert names == sorted(path.name for path in (tmp_path / "resumed").iterdir()) and len(names) > 4
    for name in names:
        if name.startswith("shard-"):
            assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "resumed" / name).read_bytes(), name


def test_pack_options_refuse_bad_values():
    with pytest.raises(PackError, match="max_side"):
        PackOptions(image_max_side=0)


def test_an_image_that_cannot_be_resized_is_skipped_or_fatal_under_strict(corpus, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    frames = [Image.new("RGB", (100, 80), color) for color in ("red", "blue")]
    frames[0].save(source / "anim.gif", save_all=True, append_images=frames[1:])
    write_image(source / "still.jpg", 100, 80)
    assert run_pack(source, tmp_path / "out", "--image-max-side", str(SIDE)).exit_code == 0
    manifest = open_manifest(tmp_path / "out")
    assert manifest.keys() == ["still"]
    assert [entry["path"] for entry in list(manifest.skip_records())] == ["anim.gif"] and "animated" in list(manifest.skip_records())[0]["reason"]
    strict = run_pack(source, tmp_path / "strict", "--image-max-side", str(SIDE), "--strict")
    assert strict.exit_code != 0 and "anim.gif" in strict.output and "animated" in strict.output


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    """A word-level tokenizer trained here, offline, on the captions."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([caption.decode() for caption in CAPTIONS.values()],
                                  trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def expected_ids(tokenizer_file: Path) -> dict:
    """{key: token ids of its caption} with the tokenizer itself."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    return {key: tokenizer.encode(caption.decode(), add_special_tokens=False).ids for key, caption in CAPTIONS.items()}


@pytest.mark.parametrize("fmt, workers", [("wds", "1"), pytest.param("tfrecord", "2", marks=pytest.mark.slow)])  # 2: a pool
def test_tokenizer_makes_tokens_npy_the_primary_field(corpus, tokenizer_file, tmp_path, fmt, workers):
    from corgi_io.loaders import CorgiPileDataset, Shuffle

    result = run_pack(corpus, tmp_path / "out", "--format", fmt, "--tokenizer", str(tokenizer_file), "--workers",
                      workers, "--block-samples", "1", "--shard-bytes", "1")
    assert result.exit_code == 0, result.output
    ids, manifest = expected_ids(tokenizer_file), open_manifest(tmp_path / "out")
    assert manifest.extensions == ["tokens.npy"] and set(manifest.fields) == {"jpg", "txt", "tokens.npy"}
    assert dict(zip(manifest.keys(), manifest.samples.size.tolist())) == {key: len(ids[key]) for key in SIZES}
    for sample in CorgiPileDataset(tmp_path / "out", seed=0, shuffle=Shuffle("none"), decode="tokens"):
        assert sample["kind"] == "text" and sample["ext"] == "tokens.npy"
        assert sample["data"].tolist() == ids[sample["key"]] and sample["txt"] == CAPTIONS[sample["key"]]
        assert sample["jpg"] == (corpus / f"{sample['key']}.jpg").read_bytes()
    if fmt == "wds":
        urls = sorted(str(path) for path in (tmp_path / "out").glob("shard-*.tar"))
        stock = {sample["__key__"]: sample["tokens.npy"].tolist()
                 for sample in webdataset.WebDataset(urls, shardshuffle=False).decode()}
        assert stock == ids


def test_drop_text_and_a_changed_tokenizer_file(corpus, tokenizer_file, tmp_path):
    from corgi_io.loaders import CorgiPileDataset, Shuffle

    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_bytes(tokenizer_file.read_bytes())
    out = tmp_path / "out"
    assert run_pack(corpus, out, "--tokenizer", str(tokenizer), "--drop-text", "--max-size", "4").exit_code == 0
    ids, manifest = expected_ids(tokenizer_file), open_manifest(out)
    assert set(manifest.keys()) == {key for key in SIZES if len(ids[key]) <= 4} == {"big/a", "big/b"}
    assert manifest.options["transforms"][0]["sha256"] and manifest.options["drop_text"]
    for sample in CorgiPileDataset(out, seed=0, shuffle=Shuffle("none")):
        assert "txt" not in sample and sample["fields"] == ["tokens.npy", "jpg"]
    tokenizer.write_text(tokenizer.read_text().replace("[UNK]", "[UNKNOWN]"))
    again = run_pack(corpus, out, "--tokenizer", str(tokenizer), "--drop-text", "--max-size", "4")
    assert again.exit_code != 0 and "transforms" in again.output and "--overwrite" in again.output


def test_drop_text_needs_a_tokenizer(corpus, tmp_path):
    result = run_pack(corpus, tmp_path / "out", "--drop-text")
    assert result.exit_code != 0 and "--tokenizer" in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt, image_format, field", [("wds", "jpeg", "jpg"), ("tfrecord", "webp", "webp")])
def test_image_format_reencodes_and_renames_fields(tmp_path, fmt, image_format, field):
    from corgi_io.loaders import CorgiPileDataset, Shuffle

    source = tmp_path / "src"
    sizes = {"p/big": (120, 60, "png"), "p/small": (20, 30, "png"), "j/small": (30, 20, "jpg")}
    for key, (width, height, ext) in sizes.items():
        write_image(source / f"{key}.{ext}", width, height)
        (source / f"{key}.txt").write_bytes(key.encode())
    result = run_pack(source, tmp_path / "out", "--format", fmt, "--image-max-side", "64", "--image-format",
                      image_format)
    assert result.exit_code == 0, result.output
    manifest = open_manifest(tmp_path / "out")
    assert manifest.extensions == [field] and set(manifest.fields) == {field, "txt"} and not list(manifest.skip_records())
    for sample in CorgiPileDataset(tmp_path / "out", seed=0, shuffle=Shuffle("none")):
        width, height, ext = sizes[sample["key"]]
        assert sample["ext"] == field and sample["fields"] == [field, "txt"] and sample["txt"] == sample["key"].encode()
        image = Image.open(io.BytesIO(sample["data"]))
        assert image.format == {"jpg": "JPEG", "webp": "WEBP"}[field] and max(image.size) == min(64, max(width, height))
        assert sample["size"] == image.size[0] * image.size[1]
        if ext == field:  # already small and in the format: byte for byte
            assert sample["data"] == (source / f"{sample['key']}.{ext}").read_bytes()
    if fmt == "wds":
        assert {name for sample in stock_wds(tmp_path / "out").values() for name in sample} == {field, "txt", "cls"}


def test_image_format_needs_image_max_side(corpus, tmp_path):
    result = run_pack(corpus, tmp_path / "out", "--image-format", "webp")
    assert result.exit_code != 0 and "--image-max-side" in result.output


MAP_MODULE = """
import json

def caption_json(fields, key):
    if key == "small/d":
        return None
    if key == "big/b":
        raise RuntimeError("cannot caption big/b")
    text = fields.pop("txt")
    return {**fields, "json": json.dumps({"caption": text.decode(), "key": key}).encode()}
"""


@pytest.mark.parametrize("workers", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_map_gives_new_fields_drops_and_skips_in_the_workers(corpus, tmp_path, write_user_module, monkeypatch,
                                                            workers):
    folder = write_user_module("user_caption_map", MAP_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(folder))
    result = run_pack(corpus, tmp_path / "out", "--map", "user_caption_map:caption_json", "--workers", workers)
    assert result.exit_code == 0, result.output
    manifest = open_manifest(tmp_path / "out")
    assert manifest.keys() == ["big/a", "small/c"] and manifest.fields == ["jpg", "json"]
    assert manifest.samples.fields.tolist() == [0b11, 0b11]
    reasons = {entry["path"]: entry["reason"] for entry in list(manifest.skip_records())}
    assert "returned None" in reasons["small/d.jpg"] and "cannot caption big/b" in reasons["big/b.jpg"]
    got = stock_wds(tmp_path / "out")
    assert set(got["big/a"]) == {"jpg", "json", "cls"} and b'"key": "big/a"' in got["big/a"]["json"]
    assert manifest.options["transforms"] == [{"name": "map", "function": "user_caption_map:caption_json"}]
    strict = run_pack(corpus, tmp_path / "strict", "--map", "user_caption_map:caption_json", "--strict")
    assert strict.exit_code != 0 and "cannot caption big/b" in strict.output


def test_map_that_removes_the_primary_field_makes_the_next_one_primary(corpus, tmp_path, write_user_module):
    write_user_module("user_text_only", "def text_only(fields, key):\n    return {'txt': fields['txt']}\n")
    assert run_pack(corpus, tmp_path / "out", "--map", "user_text_only:text_only").exit_code == 0
    manifest = open_manifest(tmp_path / "out")
    assert manifest.extensions == ["txt"] and manifest.fields == ["txt"]
    assert {manifest.extensions[e] for e in manifest.samples.ext.tolist()} == {"txt"}
    assert set(manifest.samples.kind.tolist()) == {2}  # text
    assert dict(zip(manifest.keys(), manifest.samples.size.tolist())) == {
        key: len(caption.split()) for key, caption in CAPTIONS.items()}


def test_map_on_a_source_of_tars(tmp_path, write_user_module):
    import webdataset as wds

    (tmp_path / "tars").mkdir()
    with wds.TarWriter(str(tmp_path / "tars" / "a.tar")) as writer:
        for i in range(4):
            writer.write({"__key__": f"s{i}", "txt": f"text {i}".encode()})
    write_user_module("user_upper", "def upper(fields, key):\n    return {'txt': fields['txt'].upper()}\n")
    assert run_pack(tmp_path / "tars", tmp_path / "out", "--map", "user_upper:upper").exit_code == 0
    assert {key: sample["txt"] for key, sample in stock_wds(tmp_path / "out").items()} == {
        f"s{i}": f"TEXT {i}".encode() for i in range(4)}


def test_a_missing_map_function_fails_before_any_work(corpus, tmp_path):
    result = run_pack(corpus, tmp_path / "out", "--map", "no_such_module_here:f")
    assert result.exit_code != 0 and "no_such_module_here" in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("order, workers", [("keep", "1"), ("shuffle", "1"), pytest.param("shuffle", "2",
                                                                                      marks=pytest.mark.slow)])
def test_dedup_keeps_the_first_copy_in_pack_order(tmp_path, order, workers):
    source = tmp_path / "src"
    for i in range(8):  # images 0/4, 1/5, 2/6, 3/7 are equal; their captions differ
        write_image(source / f"c{i % 2}" / f"{i}.jpg", 20 + i % 4, 10, seed=i % 4)
        (source / f"c{i % 2}" / f"{i}.txt").write_text(f"caption {i}")
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--workers", workers, "--order",
                                       order, "--dedup"])
    assert result.exit_code == 0, result.output
    manifest = open_manifest(tmp_path / "out")
    keys = manifest.keys()
    assert len(keys) == 4 and sorted(int(key.split("/")[1]) % 4 for key in keys) == [0, 1, 2, 3]
    if order == "keep":
        assert sorted(keys) == ["c0/0", "c0/2", "c1/1", "c1/3"]
    removed = [entry["path"] for entry in list(manifest.skip_records()) if "--dedup" in entry["reason"]]
    assert len(removed) == 4 and not set(removed) & {f"{key}.jpg" for key in keys}
    again = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "again"), "--workers", "1", "--order",
                                      order, "--dedup"])
    assert again.exit_code == 0 and open_manifest(tmp_path / "again").keys() == keys  # the same seed, the same copies

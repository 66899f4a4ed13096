"""Exact sizes through `corgi pack`: image pixels = PIL w*h for many encodings, video frames, text tokens."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from corgi_io.manifest import open_manifest
from helpers.corpus_factory import write_image, write_text, write_video


def _array(w, h, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _save(path, image, **options):
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, **options)


IMAGES = {  # name -> (width, height, writer)
    "baseline.jpg": (53, 37, lambda p, a: _save(p, Image.fromarray(a), format="JPEG")),
    "progressive.jpg": (61, 29, lambda p, a: _save(p, Image.fromarray(a), format="JPEG", progressive=True)),
    "rotated_exif.jpg": (45, 20, lambda p, a: _save(p, Image.fromarray(a), format="JPEG",
                                                    exif=_exif_orientation(6))),
    "gray.jpeg": (33, 70, lambda p, a: _save(p, Image.fromarray(a).convert("L"), format="JPEG")),
    "cmyk.jpg": (24, 31, lambda p, a: _save(p, Image.fromarray(a).convert("CMYK"), format="JPEG")),
    "palette.png": (40, 12, lambda p, a: _save(p, Image.fromarray(a).convert("P"), format="PNG")),
    "rgba.png": (19, 77, lambda p, a: _save(p, Image.fromarray(a).convert("RGBA"), format="PNG")),
    "deep.png": (26, 26, lambda p, a: _save(p, Image.fromarray(a[:, :, 0].astype(np.uint16) * 250), format="PNG")),
    "w.webp": (50, 21, lambda p, a: _save(p, Image.fromarray(a), format="WEBP")),
    "b.bmp": (17, 9, lambda p, a: _save(p, Image.fromarray(a), format="BMP")),
    "g.gif": (31, 15, lambda p, a: _save(p, Image.fromarray(a).convert("P"), format="GIF")),
    "t.tiff": (22, 44, lambda p, a: _save(p, Image.fromarray(a), format="TIFF")),
    "t2.tif": (8, 3, lambda p, a: _save(p, Image.fromarray(a), format="TIFF")),
    "UPPER.JPEG": (70, 10, lambda p, a: _save(p, Image.fromarray(a), format="JPEG")),
}


def _exif_orientation(value):
    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


def test_image_pixels_equal_pil_width_times_height(tmp_path, corgi):
    src = tmp_path / "src"
    for i, (name, (w, h, write)) in enumerate(IMAGES.items()):
        write(src / "img" / name, _array(w, h, i))
    out = tmp_path / "out"
    result = corgi("pack", src, out, "--workers", "1")
    assert result.exit_code == 0, result.output
    m = open_manifest(out)
    assert list(m.skip_records()) == []
    got = dict(zip(m.keys(), m.samples.size.tolist()))
    for name in IMAGES:
        with Image.open(src / "img" / name) as image:
            want = image.width * image.height
        assert got["img/" + name.rsplit(".", 1)[0]] == want, name
    assert {m.kind_name(i) for i in range(m.num_samples)} == {"image"}


@pytest.mark.parametrize("name,frames", [("one.avi", 1), ("two.mp4", 2), ("LOUD.MP4", 13), ("long.avi", 40)])
def test_video_frames_equal_frames_written(tmp_path, corgi, name, frames):
    write_video(tmp_path / "src" / "v" / name, frames, width=32, height=24)
    out = tmp_path / "out"
    assert corgi("pack", tmp_path / "src", out, "--workers", "1").exit_code == 0
    m = open_manifest(out)
    assert m.samples.size.tolist() == [frames] and m.kind_name(0) == "video"


def test_text_tokens_equal_split(tmp_path, corgi):
    src = tmp_path / "src"
    texts = {
        "t/plain.txt": "one two  three\tfour\nfive",
        "t/unicode.md": "fête ñandú 日本語 über\u3000spaces\u00a0nbsp",
        "t/blank.txt": "   \n\t ",
        "t/doc.json": '{"a": 1, "b": [1, 2]}',
        "t/rows.jsonl": '{"x": 1}\n{"y": 2}\n',
    }
    for rel, text in texts.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text, encoding="utf-8")
    generated = {f"t/gen{i}.txt": write_text(src / f"t/gen{i}.txt", n, seed=i) for i, n in enumerate([1, 7, 300])}
    out = tmp_path / "out"
    assert corgi("pack", src, out, "--workers", "1").exit_code == 0
    m = open_manifest(out)
    got = dict(zip(m.keys(), m.samples.size.tolist()))
    for rel, text in texts.items():
        assert got[rel.rsplit(".", 1)[0]] == len(text.split()), rel
    for rel, n in generated.items():
        assert got[rel.rsplit(".", 1)[0]] == n
    assert {m.kind_name(i) for i in range(m.num_samples)} == {"text"}


def test_kind_flag_forces_a_kind(tmp_path, corgi):
    write_text(tmp_path / "src" / "a" / "notes.log", 6)
    (tmp_path / "src" / "a" / "more.dat").write_text("a b c", encoding="utf-8")
    out = tmp_path / "out"
    result = corgi("pack", tmp_path / "src", out, "--kind", "text", "--workers", "1")
    assert result.exit_code == 0, result.output
    m = open_manifest(out)
    assert dict(zip(m.keys(), m.samples.size.tolist())) == {"a/notes": 6, "a/more": 3}


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_valid_image_with_trailing_bytes_is_packed(tmp_path, corgi, fmt):
    buffer = io.BytesIO()
    Image.fromarray(_array(20, 10)).save(buffer, format=fmt)
    data = buffer.getvalue() + b"\x00\x01TRAILER" * 8
    path = tmp_path / "src" / "a" / f"x.{fmt.lower()}"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    with Image.open(path) as image:
        image.load()  # a valid image: decodes completely
    out = tmp_path / "out"
    result = corgi("pack", tmp_path / "src", out, "--workers", "1")
    assert result.exit_code == 0, result.output
    m = open_manifest(out)
    assert list(m.skip_records()) == [] and m.samples.size.tolist() == [200]


def test_truncated_png_is_skipped(tmp_path, corgi):
    write_image(tmp_path / "src" / "a" / "ok.png", 10, 10)
    data = (tmp_path / "src" / "a" / "ok.png").read_bytes()
    (tmp_path / "src" / "a" / "cut.png").write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    result = corgi("pack", tmp_path / "src", out, "--workers", "1")
    assert result.exit_code == 0
    assert "a/cut.png" in result.stderr
    m = open_manifest(out)
    assert [s["path"] for s in list(m.skip_records())] == ["a/cut.png"] and m.num_samples == 1


# --- the JPEG and PNG header readers (what imagesize did, without its file-like layers) --------------

def _encoded(image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, **options)
    return buffer.getvalue()


@pytest.mark.parametrize("seed", range(3))
def test_header_readers_agree_with_pillow(seed):
    from corgi_io.images.header import _jpeg_size, _png_size
    from corgi_io.packing.sizing import image_pixels

    rng = np.random.default_rng(seed)
    for _ in range(12):
        w, h = (int(v) for v in rng.integers(1, 2100, 2))
        image = Image.fromarray(_array(w, h, seed)) if w * h < 600_000 else Image.new("RGB", (w, h))
        for options in ({"format": "JPEG"}, {"format": "JPEG", "progressive": True, "optimize": True},
                        {"format": "JPEG", "subsampling": 0, "restart_marker_blocks": 1}, {"format": "PNG"}):
            data = _encoded(image, **options)
            reader = _png_size if options["format"] == "PNG" else _jpeg_size
            assert reader(data) == (w, h) == Image.open(io.BytesIO(data)).size, options
            assert image_pixels(data) == w * h


def test_jpeg_reader_skips_a_thumbnail_and_fill_bytes():
    """An EXIF thumbnail is a whole JPEG (with its own frame header) inside APP1: it is skipped with its segment."""
    from corgi_io.images.header import _jpeg_size

    thumbnail = _encoded(Image.new("RGB", (7, 5)), format="JPEG")
    data = _encoded(Image.new("RGB", (333, 222)), format="JPEG",
                    exif=b"Exif\0\0MM\0*\0\0\0\x08\0\0" + thumbnail)
    assert thumbnail in data and _jpeg_size(data) == (333, 222)
    padded = data[:2] + b"\xff\xff" + data[2:]  # fill bytes before a marker are allowed
    assert _jpeg_size(padded) == (333, 222)


def test_a_jpeg_header_that_leads_nowhere_goes_to_pillow():
    from corgi_io.errors import BadInput
    from corgi_io.images.header import _jpeg_size
    from corgi_io.packing.sizing import image_pixels

    broken = b"\xff\xd8\xff\xe0\x00\x10" + b"JFIF" + b"\0" * 10 + b"garbage, not a marker" + b"\xff\xd9"
    assert _jpeg_size(broken) is None
    with pytest.raises(BadInput, match="not a readable image"):
        image_pixels(broken)

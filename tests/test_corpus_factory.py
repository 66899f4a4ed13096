"""The corpus factory's reported sizes are true and its broken files are really broken."""

import csv
import json

import cv2
import pytest
from PIL import Image

from helpers.corpus_factory import (
    make_image_corpus,
    make_mixed_corpus,
    write_garbage_video,
    write_image,
    write_listing,
    write_non_utf8_text,
    write_text,
    write_truncated_jpeg,
    write_video,
)


def _frames(path):
    """(CAP_PROP_FRAME_COUNT, frames actually decoded) for a video file."""
    cap = cv2.VideoCapture(str(path))
    assert cap.isOpened(), path
    reported = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    decoded = 0
    while cap.read()[0]:
        decoded += 1
    cap.release()
    return reported, decoded


def _true_size(path, kind):
    if kind == "image":
        with Image.open(path) as im:
            return im.width * im.height
    if kind == "video":
        reported, decoded = _frames(path)
        assert reported == decoded
        return decoded
    return len(path.read_text(encoding="utf-8").split())


@pytest.mark.parametrize("name,fmt", [("a.jpg", "JPEG"), ("B.JPG", "JPEG"), ("c.PNG", "PNG"),
                                      ("d.webp", "WEBP"), ("e.bmp", "BMP")])
def test_write_image(tmp_path, name, fmt):
    assert write_image(tmp_path / name, 37, 21) == 37 * 21
    with Image.open(tmp_path / name) as im:
        assert (im.format, im.size) == (fmt, (37, 21))


def test_image_seed_changes_jpeg_bytes(tmp_path):
    for seed in range(4):
        write_image(tmp_path / f"{seed}.jpg", 96, 64, seed=seed)
    assert len({(tmp_path / f"{seed}.jpg").stat().st_size for seed in range(4)}) == 4


@pytest.mark.parametrize("name", ["v.avi", "v.mp4", "V.MP4", "with space.avi", "ünï.mp4"])
@pytest.mark.parametrize("frames", [1, 8, 33])
def test_write_video_frame_count(tmp_path, name, frames):
    assert write_video(tmp_path / name, frames) == frames
    assert _frames(tmp_path / name) == (frames, frames)


@pytest.mark.parametrize("n", [0, 1, 57])
def test_write_text_tokens(tmp_path, n):
    assert write_text(tmp_path / "t.txt", n, seed=n) == n
    text = (tmp_path / "t.txt").read_text(encoding="utf-8")
    assert len(text.split()) == n
    assert n < 20 or not text.isascii()


def test_truncated_jpeg_is_truncated(tmp_path):
    path = tmp_path / "bad.jpg"
    write_truncated_jpeg(path)
    data = path.read_bytes()
    assert data.startswith(b"\xff\xd8") and b"\xff\xd9" not in data
    with Image.open(path) as im:  # the header still parses ...
        assert (im.format, im.size) == ("JPEG", (128, 96))
        with pytest.raises(OSError):  # ... but decoding fails
            im.load()


@pytest.mark.parametrize("name", ["bad.mp4", "bad.avi"])
def test_garbage_video_does_not_open(tmp_path, name):
    write_garbage_video(tmp_path / name)
    cap = cv2.VideoCapture(str(tmp_path / name))
    assert not cap.isOpened()


def test_non_utf8_text(tmp_path):
    write_non_utf8_text(tmp_path / "bad.txt")
    with pytest.raises(UnicodeDecodeError):
        (tmp_path / "bad.txt").read_bytes().decode("utf-8")


def test_mixed_corpus_matches_disk(tmp_path):
    expected = make_mixed_corpus(tmp_path, n_per_class=2)
    on_disk = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert set(expected) == on_disk
    for rel, exp in expected.items():
        path = tmp_path / rel
        assert exp.label_name == rel.split("/")[0]
        assert exp.nbytes == path.stat().st_size
        assert _true_size(path, exp.kind) == exp.size, rel
    for tricky in ("cat/a.b.c.jpg", "cat/my photo.png", "dog/fête_ñ.jpg", "dog/UPPER.JPG",
                   "bird/SHOUT.PNG", "bird/CLIP.MP4", "cat/sub/deeper/nested.jpg"):
        assert tricky in expected
    assert {e.kind for e in expected.values()} == {"image", "video", "text"}


def test_mixed_corpus_plain_names(tmp_path):
    expected = make_mixed_corpus(tmp_path, n_per_class=1, classes=("x",), with_tricky_names=False)
    assert sorted(expected) == ["x/img_000.jpg", "x/txt_000.txt", "x/vid_000.avi"]


def test_image_corpus_long_tail(tmp_path):
    expected = make_image_corpus(tmp_path, 60, classes=("a", "b"), seed=1)
    assert len(expected) == 60 and {e.label_name for e in expected.values()} == {"a", "b"}
    sizes = sorted(e.size for e in expected.values())
    assert sizes[-1] > 10 * sizes[len(sizes) // 2]  # a heavy tail, not a narrow band
    for rel, exp in list(expected.items())[:10]:
        assert _true_size(tmp_path / rel, "image") == exp.size


def test_write_listing(tmp_path):
    entries = ["cat/a.jpg", {"path": "dog/b c.png", "label": 1, "key": "k1"}]
    write_listing(tmp_path / "l.csv", entries)
    with open(tmp_path / "l.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"path": "cat/a.jpg", "label": "", "key": ""},
                    {"path": "dog/b c.png", "label": "1", "key": "k1"}]
    write_listing(tmp_path / "l.jsonl", entries, fmt="jsonl")
    lines = (tmp_path / "l.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == [{"path": "cat/a.jpg"},
                                              {"path": "dog/b c.png", "label": 1, "key": "k1"}]
    with pytest.raises(ValueError):
        write_listing(tmp_path / "l.txt", entries, fmt="txt")

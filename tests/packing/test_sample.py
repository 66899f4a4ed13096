"""The pack-time sample: field names that are safe as tar member suffixes and feature names, and the primary field."""
from __future__ import annotations

import pytest

from corgi_io.errors import BadInput
from corgi_io.manifest.fields import check_field_name, default_primary, field_kind
from corgi_io.packing.sample import PackSample


@pytest.mark.parametrize("name", ["jpg", "txt", "tokens.npy", "seg-mask.png", "cls", "a_b.c-d"])
def test_webdataset_field_names_are_accepted(name):
    assert check_field_name(name) == name


@pytest.mark.parametrize("name", ["", "JPG", ".jpg", "jpg.", "a/b", "../x", "a..b", "a b", "é", "x" * 65, None, 3])
def test_names_that_could_be_paths_or_are_not_names_are_refused(name):
    with pytest.raises(BadInput):
        check_field_name(name)


def test_field_kinds_follow_the_last_extension():
    assert [field_kind(n) for n in ("jpg", "seg.png", "mp4", "txt", "tokens.npy", "cls")] == \
        ["image", "image", "video", "text", None, None]


@pytest.mark.parametrize("names, primary", [(["txt", "json", "jpg"], "jpg"), (["txt", "mp4"], "mp4"),
                                            (["json", "txt"], "json"), (["cls", "tokens.npy"], None),
                                            (["png", "jpg"], "png")])
def test_the_default_primary_is_the_first_image_else_video_else_text(names, primary):
    assert default_primary(names) == primary


def test_a_sample_names_its_bad_field_and_prefers_the_asked_primary():
    sample = PackSample("a/1", 0, {"txt": b"a cat", "jpg": b"\xff\xd8"})
    assert sample.primary() == "jpg" and sample.primary("txt") == "txt" and sample.primary("mp4") == "jpg"
    with pytest.raises(BadInput, match="'a/2'.*'txt'.*str"):
        PackSample("a/2", 0, {"txt": "not bytes"})
    with pytest.raises(BadInput, match="no field"):
        PackSample("a/3", 0, {})

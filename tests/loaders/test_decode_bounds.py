"""Decoding is bounded and names the sample: pixel bombs are refused before any pixel is allocated,
and every decode failure is a one-line DecodeError with the key and the shard."""
from __future__ import annotations

import io
import resource

import pytest
from PIL import Image

from corgi_io import DecodeError
from corgi_io.loaders import CorgiPileDataset, Decoding
from corgi_io import PackOptions, pack
from helpers.corpus_factory import png_claiming


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    """{key: pack root} of one-sample packs: a small real PNG, a 30000x30000 and a 10000x10000
    header-only PNG, and a text file; packed without a pixel limit, which would skip the bombs."""
    files = {"small.png": None, "huge.png": png_claiming(30000, 30000), "big.png": png_claiming(10000, 10000),
             "note.txt": b"not an image at all"}
    roots = {}
    for name, data in files.items():
        source = tmp_path_factory.mktemp("bomb-corpus") / "img"
        source.mkdir()
        if data is None:
            Image.new("RGB", (7, 5), (200, 10, 10)).save(source / name)
        else:
            (source / name).write_bytes(data)
        roots["img/" + name.split(".")[0]] = tmp_path_factory.mktemp("bomb-pack") / "pack"
        pack(source.parent, roots["img/" + name.split(".")[0]], PackOptions(max_pixels=None), progress=False)
    return roots


def decode_one(roots, key: str, **options):
    (sample,) = CorgiPileDataset(roots[key], **options)
    assert sample["key"] == key
    return sample["data"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("decode", ["pil", "rgb"])
@pytest.mark.parametrize("key,pixels", [("img/huge", 900_000_000), ("img/big", 100_000_000)])
def test_a_pixel_bomb_is_refused_before_it_allocates(bombs, decode, key, pixels):
    before = peak_rss_mb()
    with pytest.raises(DecodeError) as info:
        decode_one(bombs, key, decode=decode)
    message = str(info.value)
    assert "\n" not in message and repr(key) in message and "shard-000000.tar" in message and "byte offset" in message
    assert info.value.key == key and info.value.shard == "shard-000000.tar"
    assert peak_rss_mb() - before < 100  # decoding would take 300 MB (big) or 2.7 GB (huge)


def test_max_pixels_is_the_bound_for_pil_and_rgb(bombs):
    assert decode_one(bombs, "img/small", decode=Decoding("rgb", max_pixels=35)).shape == (5, 7, 3)
    for decode in ("pil", "rgb"):
        with pytest.raises(DecodeError, match="above max_pixels=34"):
            decode_one(bombs, "img/small", decode=Decoding(decode, max_pixels=34))


def test_a_decode_failure_names_the_key_the_kind_and_the_shard(bombs):
    with pytest.raises(DecodeError) as info:
        decode_one(bombs, "img/note", decode="pil")
    message = str(info.value)
    assert "sample 'img/note' is text; decode='pil' decodes images: pack with --kind image or use decode='auto'" \
        in message and "shard-000000.tar" in message and "\n" not in message


def test_a_foreign_error_is_named_without_object_reprs(bombs):
    with pytest.raises(DecodeError) as info:
        decode_one(bombs, "img/note", decode=lambda data, sample: Image.open(io.BytesIO(data)))
    message = str(info.value)
    assert message.endswith("sample 'img/note' (text): cannot decode (UnidentifiedImageError: cannot identify "
                            "image file)"), message
    assert isinstance(info.value.__cause__, Exception)  # the decoder's own error stays attached


def test_a_failing_custom_decoder_is_named_too(bombs):
    def explode(data, sample):
        raise RuntimeError("my decoder broke\nsecond line")

    with pytest.raises(DecodeError,
                       match="sample 'img/small' \\(image\\): cannot decode \\(RuntimeError: my decoder broke\\)$"):
        decode_one(bombs, "img/small", decode=explode)

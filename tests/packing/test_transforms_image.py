"""ImageResize: pass-through byte for byte, sizes and aspect, re-encoding and renaming, EXIF, and refusals."""
from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from PIL import Image

from corgi_io.errors import BadInput, PackError
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.image import ORIENTATION, ImageResize, fit

MAKE = 0x010F  # an EXIF tag that re-encoding drops


def encoded(width, height, fmt="JPEG", mode="RGB", exif=None) -> bytes:
    """A noisy picture of width x height in `fmt` (noise, so that a wrong resize shows)."""
    rng = np.random.default_rng(width * 7919 + height)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}.get(mode, 3)
    pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    image = Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels)
    image = image.convert("P") if mode == "P" else image
    out = io.BytesIO()
    image.save(out, format=fmt, **({"exif": exif.tobytes()} if exif is not None else {}))
    return out.getvalue()


def opened(data: bytes):
    image = Image.open(io.BytesIO(data))
    return image.format, image.size, image.mode


@pytest.mark.parametrize("size, target", [((500, 375), (256, 192)), ((375, 500), (192, 256)), ((256, 10), (256, 10)),
                                          ((1000, 1), (256, 1)), ((1, 1000), (1, 256)), ((257, 257), (256, 256))])
def test_fit_keeps_the_aspect_and_bounds_the_longer_side(size, target):
    assert fit(*size, 256) == target


@pytest.mark.parametrize("fmt, field, out_format", [("JPEG", "jpg", "keep"), ("JPEG", "jpeg", "jpeg"),
                                                    ("PNG", "png", "keep"), ("WEBP", "webp", "webp")])
def test_an_image_small_enough_in_its_output_format_passes_byte_for_byte(fmt, field, out_format):
    data = encoded(200, 150, fmt)
    kept = ImageResize(256, format=out_format)(PackSample("k", 3, {field: data, "cls": b"3"}))
    assert kept.sample.fields[field] is data and list(kept.sample.fields) == [field, "cls"]
    assert kept.sizes == {field: 200 * 150} and kept.sample.label == 3 and kept.sample.key == "k"


@pytest.mark.parametrize("size, target", [((500, 375), (256, 192)), ((375, 500), (192, 256)), ((2000, 1500), (256, 192))])
def test_a_large_jpeg_is_resized_keeping_its_aspect(size, target):
    kept = ImageResize(256)(PackSample("k", 0, {"jpg": encoded(*size)}))
    assert opened(kept.sample.fields["jpg"]) == ("JPEG", target, "RGB")
    assert kept.sizes == {"jpg": target[0] * target[1]}


def test_a_resize_is_close_to_a_plain_lanczos_resize():
    data = encoded(2000, 1500)
    ours = np.asarray(Image.open(io.BytesIO(ImageResize(256, quality=95)(PackSample("k", 0, {"jpg": data})).sample.fields["jpg"])))
    plain = np.asarray(Image.open(io.BytesIO(data)).resize((256, 192), Image.Resampling.LANCZOS))
    assert np.abs(ours.astype(int) - plain.astype(int)).mean() < 12  # noise pictures: the worst case for any filter


@pytest.mark.parametrize("fmt, field, out_format, new_field, new_format", [
    ("PNG", "png", "jpeg", "jpg", "JPEG"), ("JPEG", "jpg", "webp", "webp", "WEBP"),
    ("PNG", "seg.png", "webp", "seg.webp", "WEBP"), ("PNG", "png", "keep", "png", "PNG")])
def test_re_encoding_renames_the_field_in_place(fmt, field, out_format, new_field, new_format):
    sample = PackSample("k", 0, {"txt": b"a cat", field: encoded(600, 300, fmt), "cls": b"1"})
    kept = ImageResize(300, format=out_format)(sample)
    assert list(kept.sample.fields) == ["txt", new_field, "cls"]
    assert opened(kept.sample.fields[new_field])[:2] == (new_format, (300, 150))
    assert kept.sizes == {new_field: 300 * 150}


def test_a_small_image_in_another_format_is_re_encoded_at_its_size():
    kept = ImageResize(256, format="jpeg")(PackSample("k", 0, {"png": encoded(100, 80, "PNG")}))
    assert opened(kept.sample.fields["jpg"]) == ("JPEG", (100, 80), "RGB")


@pytest.mark.parametrize("mode, out_format, out_mode", [("RGBA", "jpeg", "RGB"), ("RGBA", "webp", "RGBA"),
                                                       ("P", "jpeg", "RGB"), ("L", "jpeg", "L")])
def test_modes_are_converted_for_the_output_format(mode, out_format, out_mode):
    kept = ImageResize(64, format=out_format)(PackSample("k", 0, {"png": encoded(128, 96, "PNG", mode)}))
    (data,) = kept.sample.fields.values()
    assert opened(data)[1:] == ((64, 48), out_mode)


def test_the_orientation_tag_is_kept_and_the_rest_of_exif_dropped():
    exif = Image.Exif()
    exif[ORIENTATION], exif[MAKE] = 6, "camera"
    kept = ImageResize(256)(PackSample("k", 0, {"jpg": encoded(500, 375, exif=exif)}))
    image = Image.open(io.BytesIO(kept.sample.fields["jpg"]))
    assert image.size == (256, 192) and dict(image.getexif()) == {ORIENTATION: 6}  # pixels not rotated


def test_an_image_above_max_pixels_is_refused_from_its_header_before_decoding():
    truncated = encoded(500, 375)[:2000]  # a header and a broken body: decoding it would fail otherwise
    with pytest.raises(BadInput, match=r"'k7'.*'jpg'.*187,500 pixels, above the limit of 100,000"):
        ImageResize(256, max_pixels=100_000)(PackSample("k7", 0, {"jpg": truncated}))


def test_unreadable_and_animated_images_are_bad_input_naming_the_sample():
    with pytest.raises(BadInput, match="'k1'.*'jpg' is not a readable image"):
        ImageResize(256)(PackSample("k1", 0, {"jpg": b"not an image"}))
    frames = [Image.new("RGB", (300, 300), color) for color in ("red", "blue")]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:])
    with pytest.raises(BadInput, match="'k2'.*animated"):
        ImageResize(256)(PackSample("k2", 0, {"gif": out.getvalue()}))


def test_a_re_encoded_field_may_not_replace_another():
    sample = PackSample("k", 0, {"png": encoded(300, 300, "PNG"), "jpg": encoded(10, 10)})
    with pytest.raises(BadInput, match="'k'.*'png'.*'jpg'"):
        ImageResize(256, format="jpeg")(sample)


@pytest.mark.parametrize("options", [{"max_side": 0}, {"max_side": 256, "format": "png"}, {"max_side": 2.5},
                                     {"max_side": 256, "quality": 101}, {"max_side": 256, "max_pixels": 0}])
def test_bad_options_are_pack_errors(options):
    with pytest.raises(PackError, match="resize: "):
        ImageResize(**options)


def test_it_pickles_and_records_its_options():
    resize = ImageResize(128, format="webp", quality=80)
    assert pickle.loads(pickle.dumps(resize)) == resize
    assert resize.options() == {"max_side": 128, "format": "webp", "quality": 80, "max_pixels": 89_478_485}


def test_a_format_pillow_cannot_write_is_bad_input(monkeypatch):
    sample = PackSample("k", 0, {"png": encoded(128, 96, "PNG")})
    Image.init()  # every plugin registered, so that removing the PNG writer sticks
    monkeypatch.delitem(Image.SAVE, "PNG")
    with pytest.raises(BadInput, match="'k'.*'png' is PNG, which Pillow cannot write"):
        ImageResize(64)(sample)

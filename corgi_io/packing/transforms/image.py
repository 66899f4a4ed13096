"""`ImageResize`: shrink each image field to a longest side of at most `max_side`, and re-encode it.

The filter: a JPEG at least twice the target size is first scaled by libjpeg while it decodes
(`draft`: 1/2, 1/4 or 1/8, never below the target), then Pillow's LANCZOS with `reducing_gap=2.0`
(an integer `reduce` first when the factor is large) makes the exact size.  `draft` at the target
size was the faster choice: on 1600x1200 JPEGs -> 256 it took 7.7 ms a picture against 11.0 ms for
`draft` at twice the target (what `Image.thumbnail` does) and 21.9 ms for a plain resize.
bench/resize.py (2 shared cores, medians of interleaved rounds, against open -> resize(LANCZOS) ->
save): ImageNet-sized 500x375 -> 256, where no scale applies, 2.9 ms a picture, 0.99-1.04x the
Pillow loop; 1600x1200 -> 256, 7.4 ms against 25.1 ms, 3.4x.

EXIF orientation: pixels are never rotated.  A re-encoded image keeps its Orientation tag (and only
that tag: GPS, thumbnails and other metadata go), so every decoder shows it as it showed the input,
and a re-encoded image looks the same as one passed through byte for byte.  The corgi loader
ignores the tag for both alike; a loader that honours it rotates both alike.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar

from PIL import Image

from corgi_io.arguments import check_at_least, choose
from corgi_io.errors import ArgumentError, BadInput
from corgi_io.images.header import above_pixel_limit, image_size, open_unbounded
from corgi_io.images.pillow import eight_bits
from corgi_io.manifest.fields import field_kind
from corgi_io.manifest.schema import DEFAULT_MAX_PIXELS
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.chain import Kept, checking_options

IMAGE_FORMATS = {"jpeg": ("JPEG", "jpg"), "webp": ("WEBP", "webp"), "keep": None}  # name -> (Pillow format, field)
FIELD_OF_FORMAT = {"JPEG": ("jpg", "jpeg"), "WEBP": ("webp",)}  # a field already named for the format keeps its name
JPEG_FORMATS = ("JPEG", "MPO")  # Pillow opens a camera's multi-picture JPEG as MPO: its first picture is the image
ORIENTATION = 0x0112  # the EXIF Orientation tag
PLAIN_MODES = ("RGB", "RGBA", "L")  # modes every output format takes (JPEG: not RGBA, composited on white)


def fit(width: int, height: int, max_side: int) -> tuple:
    """(width, height) scaled so that the longer side is `max_side` (aspect kept, each side >= 1);
    unchanged when the longer side is at most `max_side` already."""
    longer = max(width, height)
    if longer <= max_side:
        return width, height
    return max(1, round(width * max_side / longer)), max(1, round(height * max_side / longer))


@dataclass(frozen=True)
class ImageResize:
    """Resize every image field whose longer side exceeds `max_side`; re-encode as `format` at `quality`.

    `format`: "jpeg", "webp", or "keep" (the input's own format).  An image small enough, and already
    in the output format, passes through byte for byte.  A field re-encoded into another format is
    renamed for it (``png`` -> ``jpg``), in place.  Each image's pixels after the transform are its
    size in `Kept.sizes`.  An image whose header declares more than `max_pixels` pixels (a
    decompression bomb) is refused before any pixel is decoded: BadInput, as is an animated image that
    must be resized or re-encoded (that would keep one frame; one that passes through is kept whole)
    or one Pillow cannot read.  An image of 16 or 32 bits a pixel is re-encoded at 8 bits, scaled, not
    clipped (`corgi_io.images.pillow.eight_bits`).
    """

    name: ClassVar[str] = "resize"
    max_side: int
    format: str = "keep"
    quality: int = 90
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self):
        with checking_options(self.name):
            check_at_least("max_side", self.max_side, 1, optional=False)
            choose("format", self.format, IMAGE_FORMATS)
            if check_at_least("quality", self.quality, 1, optional=False) > 100:
                raise ArgumentError(f"quality must be at most 100, got {self.quality!r}")
            check_at_least("max_pixels", self.max_pixels, 1, optional=False)

    def options(self) -> dict:
        """The JSON-able options that rebuild this transform (the manifest records them)."""
        return {"max_side": self.max_side, "format": self.format, "quality": self.quality,
                "max_pixels": self.max_pixels}

    def __call__(self, sample: PackSample) -> Kept:
        """The sample with each image field resized and re-encoded as needed; sizes: each image's pixels."""
        fields, sizes = {}, {}
        for name, data in sample.fields.items():
            if field_kind(name) != "image":
                fields[name] = data
                continue
            new_name, data, pixels = self._field(sample.key, name, data)
            if new_name != name and new_name in sample.fields:
                raise BadInput(f"sample {sample.key!r}: field {name!r} re-encoded would replace field {new_name!r}")
            fields[new_name], sizes[new_name] = data, pixels
        return Kept(PackSample(sample.key, sample.label, fields), sizes)

    def _field(self, key: str, name: str, data: bytes) -> tuple:
        """(field name, bytes, pixels) of one image field after the transform."""
        try:
            with open_unbounded(data) as image:  # reads the header only; max_pixels is the one bound
                target = self._target(key, name, image_size(data, image))
                source_format = "JPEG" if image.format in JPEG_FORMATS else image.format
                out_format = source_format if self.format == "keep" else IMAGE_FORMATS[self.format][0]
                if target == image.size and out_format == source_format:
                    return name, data, target[0] * target[1]  # animated ones too: nothing to change
                if getattr(image, "n_frames", 1) > 1 and image.format not in JPEG_FORMATS:
                    raise BadInput(f"sample {key!r}: field {name!r} is animated ({image.n_frames} frames); "
                                   f"re-encoding would keep one frame")
                encoded = encode(image, target, out_format, self.quality)
        except BadInput:
            raise
        except KeyError:  # Image.SAVE, Pillow's registry of writers, has none for the format
            raise BadInput(f"sample {key!r}: field {name!r} is {out_format}, which Pillow cannot write") from None
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise BadInput(f"sample {key!r}: field {name!r} is not a readable image ({exc})") from None
        return _field_name(name, out_format), encoded, target[0] * target[1]

    def _target(self, key: str, name: str, size: tuple) -> tuple:
        """The output size of an image of `size` (width, height: its header's); BadInput above max_pixels."""
        width, height = size
        if above_pixel_limit(width * height, self.max_pixels):
            raise BadInput(f"sample {key!r}: field {name!r} has {width * height:,} pixels, above the limit of "
                           f"{self.max_pixels:,} (max_pixels)")
        return fit(width, height, self.max_side)


def encode(image, target: tuple, out_format: str, quality: int) -> bytes:
    """`image` (opened, not yet decoded) resized to `target` and encoded as `out_format`, with its
    Orientation tag only."""
    orientation = image.getexif().get(ORIENTATION)
    scale = min(image.size[0] // target[0], image.size[1] // target[1])  # libjpeg scales by 1/2 and less only
    box = image.draft(None, target) if image.format in JPEG_FORMATS and scale >= 2 else None
    pixels = _plain_mode(image)
    if target != pixels.size:
        pixels = pixels.resize(target, Image.Resampling.LANCZOS, box=box[1] if box else None, reducing_gap=2.0)
    if out_format == "JPEG" and pixels.mode == "RGBA":
        pixels = Image.alpha_composite(Image.new("RGBA", pixels.size, "white"), pixels).convert("RGB")
    extra = {}
    if orientation not in (None, 1):
        exif = Image.Exif()
        exif[ORIENTATION] = orientation
        extra["exif"] = exif.tobytes()
    out = io.BytesIO()
    pixels.save(out, format=out_format, quality=quality, **extra)
    return out.getvalue()


def _plain_mode(image):
    """`image` in one of PLAIN_MODES (palette, CMYK converted; alpha kept as RGBA; 16- and 32-bit scaled to 8
    bits, not clipped: `eight_bits`), so LANCZOS applies and every output format takes it."""
    image = eight_bits(image)
    if image.mode in PLAIN_MODES:
        return image
    alpha = image.mode in ("LA", "PA") or "transparency" in image.info
    return image.convert("RGBA" if alpha else "RGB")


def renamed_field(name: str, format: str) -> str:
    """The name of field `name` after `ImageResize` with `format`: an image field re-encoded as "jpeg" or "webp"
    is renamed for it (``png`` -> ``jpg``); other fields, and every field with "keep", keep their names."""
    if IMAGE_FORMATS[format] is None or field_kind(name) != "image":
        return name
    return _field_name(name, IMAGE_FORMATS[format][0])


def _field_name(name: str, out_format: str) -> str:
    """The field's name for an image now in `out_format`: its last extension replaced unless it already fits."""
    stem, _, extension = name.rpartition(".")
    names = FIELD_OF_FORMAT.get(out_format)
    if names is None or extension in names:
        return name
    return f"{stem}.{names[0]}" if stem else names[0]

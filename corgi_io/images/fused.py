"""One image's decode, crop and resize in one pass, written straight into its slot of a batch.

`decode_crop_resize(data, box_of, out, flip)` reads the header (no pixel decoded yet), refuses an
image above `max_pixels`, asks `box_of(width, height)` for the crop, and then:

1. **DCT-domain scaling.**  A JPEG is decoded at 1/2, 1/4 or 1/8 of its size (libjpeg-turbo's
   scaled IDCT, almost free) when the crop is still at least the output's size at that scale:
   `dct_reduction`.  Only those three factors: libjpeg-turbo's other M/8 scales cost more than a
   full decode.
2. **One resize, into the batch.**  The crop is a view of the decoded array; OpenCV resizes it
   into `out` (a row of the caller's preallocated (B, H, W, 3) uint8 array): bilinear while the
   remaining shrink factor is under 2 (the DCT scaling keeps it there), area averaging beyond.
3. **Flip in place** (`cv2.flip` into `out`).

The JPEG decoder is chosen from `JPEG_DECODERS` by name: "simplejpeg" (libjpeg-turbo through
simplejpeg, the default where it is installed: the fastest here, docs/decoding.md), "opencv"
(`IMREAD_REDUCED_*`, the default otherwise: 5% slower, and a dependency already) or "pillow" (Pillow's
`draft`: 1.2 ms more per ImageNet-sized image).  CMYK JPEGs and every other format (PNG,
WebP...) are decoded by Pillow at full size, through the same crop and resize.  Nothing here imports
torch.
"""
from __future__ import annotations

import sys

import cv2
import numpy as np

from corgi_io.errors import DecodeError
from corgi_io.images.header import image_size
from corgi_io.images.pillow import check_pixels, open_header, open_image

JPEG_MAGIC = b"\xff\xd8\xff"
REDUCTIONS = (8, 4, 2)  # the DCT scales that cost less than a full decode (libjpeg-turbo's 1/8, 1/4, 1/2)
_PLAIN_COLOURS = ("Gray", "YCbCr", "RGB")  # JPEG colour spaces libjpeg-turbo turns into RGB itself


def dct_reduction(crop_width: int, crop_height: int, out_width: int, out_height: int) -> int:
    """The largest of 8, 4, 2 (else 1) by which the crop can shrink and still cover the output in both directions."""
    for factor in REDUCTIONS:
        if crop_width >= factor * out_width and crop_height >= factor * out_height:
            return factor
    return 1


def _simplejpeg(data: bytes, width: int, height: int, reduction: int) -> np.ndarray:
    import simplejpeg

    scaled = {} if reduction == 1 else {"min_width": -(-width // reduction), "min_height": -(-height // reduction)}
    return simplejpeg.decode_jpeg(data, colorspace="RGB", **scaled)


def _pillow(data: bytes, width: int, height: int, reduction: int) -> np.ndarray:
    image = open_header(data, sys.maxsize)  # the caller checked max_pixels: no second bound
    if reduction > 1:
        image.draft("RGB", (-(-width // reduction), -(-height // reduction)))
    return np.asarray(image.convert("RGB"))


_CV2_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
              8: cv2.IMREAD_REDUCED_COLOR_8}


def _opencv(data: bytes, width: int, height: int, reduction: int) -> np.ndarray:
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), _CV2_FLAGS[reduction])
    if bgr is None:
        raise DecodeError("OpenCV cannot decode this JPEG")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


# name -> (data, width, height, reduction) -> the RGB uint8 array at 1/reduction of the size (dims rounded up)
JPEG_DECODERS = {"simplejpeg": _simplejpeg, "pillow": _pillow, "opencv": _opencv}


def default_jpeg_decoder() -> str:
    """"simplejpeg" where it is installed (``pip install 'corgi-io[images]'``), else "opencv" (see the module)."""
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return "opencv"
    return "simplejpeg"


def image_header(data: bytes, max_pixels: int | None) -> tuple:
    """(width, height, a JPEG that libjpeg-turbo turns into RGB itself), from the header alone; DecodeError for
    an image above `max_pixels`, before any pixel is decoded."""
    if data[:3] == JPEG_MAGIC and default_jpeg_decoder() == "simplejpeg":
        import simplejpeg

        try:
            height, width, colour, _ = simplejpeg.decode_jpeg_header(data)
        except ValueError as exc:
            raise DecodeError(f"not a readable JPEG header ({exc})") from None
        check_pixels(*image_size(data), max_pixels)  # counted as the pack counts them
        return width, height, colour in _PLAIN_COLOURS
    image = open_header(data, max_pixels)
    return image.size[0], image.size[1], image.format == "JPEG" and image.mode in ("L", "RGB")


def decode_crop_resize(data: bytes, box_of, out: np.ndarray, flip: bool, *, max_pixels: int | None,
                       jpeg_decoder: str = "simplejpeg") -> np.ndarray:
    """Decode `data`, crop `box_of(width, height)` = (x, y, w, h), resize it into `out` (H, W, 3) uint8 and flip it
    if `flip`; `out` is returned.  DecodeError before any pixel is decoded for an image above `max_pixels`."""
    width, height, plain_jpeg = image_header(data, max_pixels)
    x, y, w, h = box_of(width, height)
    out_height, out_width = out.shape[:2]
    reduction = dct_reduction(w, h, out_width, out_height) if plain_jpeg else 1
    if plain_jpeg:
        pixels = JPEG_DECODERS[jpeg_decoder](data, width, height, reduction)
    else:
        pixels = _full_rgb(data, max_pixels)
    scale_x, scale_y = pixels.shape[1] / width, pixels.shape[0] / height  # 1/reduction, or a hair above it
    crop = pixels[int(y * scale_y):max(int(y * scale_y) + 1, round((y + h) * scale_y)),
                  int(x * scale_x):max(int(x * scale_x) + 1, round((x + w) * scale_x))]
    shrink = min(crop.shape[1] / out_width, crop.shape[0] / out_height)
    cv2.resize(crop, (out_width, out_height), dst=out, interpolation=cv2.INTER_AREA if shrink >= 2 else
               cv2.INTER_LINEAR)
    if flip:
        cv2.flip(out, 1, dst=out)
    return out


def _full_rgb(data: bytes, max_pixels: int | None) -> np.ndarray:
    """Any format Pillow reads, as an RGB uint8 array at full size (`max_pixels` already checked by the caller)."""
    return np.asarray(open_image(data, max_pixels))


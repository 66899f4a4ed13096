"""Size probes: the work a sample costs, measured once at pack time and kept in the manifest.

* image - pixels (w*h) read from the header by Pillow, without decoding the pixels;
* video - frames, from OpenCV's CAP_PROP_FRAME_COUNT, or counted when the container lies;
* text  - whitespace tokens of the UTF-8 text;
* any   - a user function ``module:function`` called as ``function(path) -> int``.

Each probe also rejects inputs that are corrupt in a way that is cheap to see (a JPEG
without its end marker, a PNG without IEND, a video OpenCV cannot open, text that is
not UTF-8) by raising :class:`BadInput`; a full decode of every image would cost more
than the whole pack.
"""
from __future__ import annotations

import importlib
import io

import imagesize
from PIL import Image, UnidentifiedImageError

from corgi_io.errors import BadInput, PackError

MAX_PLAUSIBLE_FRAMES = 10_000_000
JPEG_MAGIC = b"\xff\xd8"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"\0\0\0\0IEND\xaeB`\x82"  # the whole IEND chunk: length 0, type, CRC


def image_pixels(data: bytes) -> int:
    """w*h of an encoded image, from its header; rejects truncated JPEG and PNG files.

    `imagesize` reads JPEG/PNG headers in ~10 us against Pillow's ~28 us (bench/pack.py
    profile); Pillow remains the authority for every format imagesize does not know.
    """
    header_readable = data[:2] == JPEG_MAGIC or data[:8] == PNG_MAGIC
    # w*h does not depend on EXIF rotation, and skipping it saves a third of the probe
    width, height = imagesize.get(io.BytesIO(data), exif_rotation=False) if header_readable else (-1, -1)
    if width < 0:
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
        except UnidentifiedImageError:  # its message holds the repr of our BytesIO: name no object
            raise BadInput("not a readable image (Pillow does not recognise its format)") from None
        except (OSError, SyntaxError, ValueError) as exc:
            raise BadInput(f"not a readable image ({exc})") from None
    # cheap truncation checks that still accept trailing data (camera trailers, motion photos)
    if (data[:2] == JPEG_MAGIC and not data.endswith(b"\xff\xd9")
            and data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda")):
        raise BadInput("truncated JPEG (no end-of-image marker after the last scan)")
    if data[:8] == PNG_MAGIC and PNG_IEND not in data:
        raise BadInput("truncated PNG (no IEND chunk)")
    if width <= 0 or height <= 0:
        raise BadInput(f"image has size {width}x{height}")
    return width * height


def video_frames(path: str) -> int:
    """Frame count of a video file: the container's count when plausible, else counted by grabbing."""
    import cv2

    capture = cv2.VideoCapture(path)
    try:
        if not capture.isOpened():
            raise BadInput("OpenCV cannot open this video")
        reported = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        if 0 < reported < MAX_PLAUSIBLE_FRAMES:
            return reported
        counted = 0
        while capture.grab():
            counted += 1
        if counted == 0:
            raise BadInput("video has no decodable frames")
        return counted
    finally:
        capture.release()


def text_tokens(data: bytes) -> int:
    """Whitespace-separated tokens of UTF-8 text."""
    try:
        return len(data.decode("utf-8").split())
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text (byte {exc.start})") from None


def load_size_fn(spec: str):
    """Import ``module:function`` for a custom size; fails early with a clear message."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise PackError(f"--size-fn {spec!r}: expected MODULE:FUNCTION")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise PackError(f"--size-fn {spec!r}: {exc}") from None
    if not callable(function):
        raise PackError(f"--size-fn {spec!r} is not callable")
    return function


def probe_size(kind: str, path: str, data: bytes, size_fn=None) -> int:
    """The size of one sample of `kind`; `size_fn`, when given, replaces the built-in probe."""
    if size_fn is not None:
        try:
            size = size_fn(path)
        except Exception as exc:  # a user function may raise anything; the file is then skipped
            raise BadInput(f"size function failed: {type(exc).__name__}: {exc}") from None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BadInput(f"size function returned {size!r}, expected a non-negative int")
        return size
    if not data and kind != "text":
        raise BadInput(f"empty {kind} file (0 bytes)")
    if kind == "image":
        return image_pixels(data)
    if kind == "video":
        return video_frames(path)
    return text_tokens(data)

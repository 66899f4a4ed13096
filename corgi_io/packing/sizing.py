"""Size probes: the work a sample costs, measured once at pack time and kept in the manifest.

* image - pixels (w*h) read from the header, without decoding the pixels, by the header reader the
  loaders share (`corgi_io.images.header`);
* video - frames, from OpenCV's CAP_PROP_FRAME_COUNT, or counted when the container lies;
* text  - whitespace tokens of the UTF-8 text, counted a chunk at a time (bounded memory);
* any   - a user function ``module:function`` called as ``function(path) -> int``.

Each probe also rejects inputs that are corrupt in a way that is cheap to see (a JPEG
without its end marker, a PNG without IEND, a video OpenCV cannot open, text that is
not UTF-8) by raising :class:`BadInput`; a full decode of every image would cost more
than the whole pack.
"""
from __future__ import annotations

import codecs
import functools

from PIL import Image, UnidentifiedImageError

from corgi_io.errors import BadInput
from corgi_io.images.header import JPEG_MAGIC, PNG_MAGIC, above_pixel_limit, image_size

MAX_PLAUSIBLE_FRAMES = 10_000_000
TEXT_CHUNK = 1 << 20  # bytes of text decoded and counted at a time
MAX_WHITESPACE = 0x3000  # the highest code point that str.split() treats as whitespace (IDEOGRAPHIC SPACE)
PNG_IEND = b"\0\0\0\0IEND\xaeB`\x82"  # the whole IEND chunk: length 0, type, CRC


def image_pixels(data: bytes) -> int:
    """w*h of an encoded image, from its header as the loaders read it (`corgi_io.images.header.image_size`);
    rejects truncated JPEG and PNG files."""
    width, height = _header_size(data)
    # cheap truncation checks that still accept trailing data (camera trailers, motion photos)
    if (data[:2] == JPEG_MAGIC and not data.endswith(b"\xff\xd9")
            and data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda")):
        raise BadInput("truncated JPEG (no end-of-image marker after the last scan)")
    if data[:8] == PNG_MAGIC and PNG_IEND not in data:
        raise BadInput("truncated PNG (no IEND chunk)")
    if width <= 0 or height <= 0:
        raise BadInput(f"image has size {width}x{height}")
    return width * height


def _header_size(data: bytes) -> tuple:
    """`image_size`, its Pillow errors as BadInput."""
    try:
        return image_size(data)
    except UnidentifiedImageError:  # its message holds the repr of our BytesIO: name no object
        raise BadInput("not a readable image (Pillow does not recognise its format)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadInput(f"not a readable image ({exc})") from None


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


def text_tokens(data: bytes, chunk_bytes: int = TEXT_CHUNK) -> int:
    """Whitespace-separated tokens of UTF-8 text, exactly ``len(data.decode("utf-8").split())``.

    Decoded `chunk_bytes` at a time (incrementally, so a character may straddle two chunks) and
    counted as token starts, so a 200 MB text needs a few MiB beside its bytes, not a list of
    every word (15x the file); text that is not UTF-8 raises BadInput naming the first bad byte.
    """
    decoder, tokens, after_space = codecs.getincrementaldecoder("utf-8")(), 0, True
    view = memoryview(data)
    for start in range(0, max(len(data), 1), chunk_bytes):
        pending = len(decoder.getstate()[0])  # bytes of a character begun in the previous chunk
        try:
            text = decoder.decode(view[start:start + chunk_bytes], final=start + chunk_bytes >= len(data))
        except UnicodeDecodeError as exc:
            raise BadInput(f"not UTF-8 text (byte {start - pending + exc.start})") from None
        if text:
            starts, after_space = _token_starts(text, after_space)
            tokens += starts
    return tokens


def _token_starts(text: str, after_space: bool) -> tuple:
    """(tokens that begin in `text`, whether it ends in whitespace); `after_space`: the text before it did."""
    import numpy as np

    if text.isascii():
        codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:  # every code point above MAX_WHITESPACE looks up the table's last entry, False
        codes = np.minimum(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), MAX_WHITESPACE + 1)
    space = _whitespace_table()[codes]
    starts = np.count_nonzero(space[:-1] & ~space[1:]) + int(after_space and not space[0])
    return starts, bool(space[-1])


@functools.cache
def _whitespace_table():
    """Per code point up to MAX_WHITESPACE + 1: is it whitespace to `str.split()` (`str.isspace`, the same test)."""
    import numpy as np

    return np.array([chr(code).isspace() for code in range(MAX_WHITESPACE + 2)], dtype=bool)


def probe_size(kind: str, path: str, data: bytes, size_fn=None, max_pixels: int | None = None) -> int:
    """The size of one sample of `kind`; `size_fn`, when given, replaces the built-in probe.

    An image of more than `max_pixels` pixels (a decompression bomb, or just too large to decode)
    raises BadInput; its header is read for that even when `size_fn` gives the size.
    """
    size = _custom_size(size_fn, path) if size_fn is not None else _built_in_size(kind, path, data)
    if kind == "image" and max_pixels is not None:
        pixels = size if size_fn is None else image_pixels(data)
        if above_pixel_limit(pixels, max_pixels):
            raise BadInput(f"image of {pixels:,} pixels, above the limit of {max_pixels:,} (--max-pixels)")
    return size


def _custom_size(size_fn, path: str) -> int:
    try:
        size = size_fn(path)
    except Exception as exc:  # a user function may raise anything; the file is then skipped
        raise BadInput(f"size function failed: {type(exc).__name__}: {exc}") from None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BadInput(f"size function returned {size!r}, expected a non-negative int")
    return size


def _built_in_size(kind: str, path: str, data: bytes) -> int:
    if not data and kind != "text":
        raise BadInput(f"empty {kind} file (0 bytes)")
    if kind == "image":
        return image_pixels(data)
    if kind == "video":
        return video_frames(path) if path is not None else _video_frames_of_bytes(data)
    return text_tokens(data)


def _video_frames_of_bytes(data: bytes) -> int:
    """`video_frames` of a video held in memory (a source's field): OpenCV opens files only, so through a
    temporary file that is gone when this returns."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".video", prefix="corgi-probe-") as file:
        file.write(data)
        file.flush()
        return video_frames(file.name)

"""Size probes: the work a sample costs, measured once at pack time and kept in the manifest.

* image - pixels (w*h) read from the header, without decoding the pixels: JPEG and PNG headers
  directly (the start-of-frame segment, the IHDR chunk), every other format by Pillow;
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
import io

from PIL import Image, UnidentifiedImageError

from corgi_io.errors import BadInput

MAX_PLAUSIBLE_FRAMES = 10_000_000
TEXT_CHUNK = 1 << 20  # bytes of text decoded and counted at a time
MAX_WHITESPACE = 0x3000  # the highest code point that str.split() treats as whitespace (IDEOGRAPHIC SPACE)
JPEG_MAGIC = b"\xff\xd8"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"\0\0\0\0IEND\xaeB`\x82"  # the whole IEND chunk: length 0, type, CRC
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn markers (not DHT, JPG, DAC)
JPEG_STANDALONE = frozenset([0x01, 0xD8, *range(0xD0, 0xD8)])  # TEM, SOI, RSTn: no length field


def image_pixels(data: bytes) -> int:
    """w*h of an encoded image, from its header; rejects truncated JPEG and PNG files.

    JPEG and PNG sizes are read straight from the bytes (about 2 us, against 12 us for
    `imagesize` and 28 us for Pillow: bench/pack.py's profile); Pillow is the authority for
    every other format, and for any JPEG whose markers do not lead to a frame header.
    """
    found = _jpeg_size(data) if data[:2] == JPEG_MAGIC else _png_size(data) if data[:8] == PNG_MAGIC else None
    width, height = found or _pillow_size(data)
    # cheap truncation checks that still accept trailing data (camera trailers, motion photos)
    if (data[:2] == JPEG_MAGIC and not data.endswith(b"\xff\xd9")
            and data.rfind(b"\xff\xd9") < data.rfind(b"\xff\xda")):
        raise BadInput("truncated JPEG (no end-of-image marker after the last scan)")
    if data[:8] == PNG_MAGIC and PNG_IEND not in data:
        raise BadInput("truncated PNG (no IEND chunk)")
    if width <= 0 or height <= 0:
        raise BadInput(f"image has size {width}x{height}")
    return width * height


def _jpeg_size(data: bytes):
    """(width, height) from a JPEG's first start-of-frame segment, walking the marker segments that
    precede it (a thumbnail inside APP1 is skipped whole); None if they do not lead to one."""
    position, end = 2, len(data) - 9
    while position < end:
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker in JPEG_FRAMES:
            return (int.from_bytes(data[position + 7:position + 9], "big"),
                    int.from_bytes(data[position + 5:position + 7], "big"))
        if marker == 0xFF:  # a fill byte before a marker
            position += 1
        elif marker in JPEG_STANDALONE:
            position += 2
        else:
            position += 2 + int.from_bytes(data[position + 2:position + 4], "big")
    return None


def _png_size(data: bytes):
    """(width, height) from a PNG's IHDR chunk, the first one; None if it is not there."""
    if data[12:16] != b"IHDR" or len(data) < 24:
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _pillow_size(data: bytes) -> tuple:
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except UnidentifiedImageError:  # its message holds the repr of our BytesIO: name no object
        raise BadInput("not a readable image (Pillow does not recognise its format)") from None
    except (OSError, SyntaxError, ValueError) as exc:
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
        if pixels > max_pixels:
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

"""Hostile or unusual inputs at pack time (issue 28): deep images, animated GIFs, a tokenizer that is no file,
type-confused TFRecord Examples, Parquet compression bombs.  Each case failed before its fix."""
from __future__ import annotations

import io
import os
import re
import struct
import threading
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from corgi_io.errors import BadInput, PackError
from corgi_io.formats.example_proto import _delimited, decode_example, encode_example, varint
from corgi_io.formats.tfrecord import masked_crc
from corgi_io.images.pillow import open_image
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit, read_unit
from corgi_io.packing.transforms.image import ImageResize
from corgi_io.packing.transforms.tokenize import MAX_TOKENIZER_BYTES, Tokenize
from helpers.parquet_bombs import bomb, pack_peak

GRADIENT = np.tile(np.linspace(0, 65535, 1024), (8, 1))  # 0-65535 along each row


def encoded(pixels, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def levels_along_a_row(data: bytes) -> np.ndarray:
    """The first row of the image in `data`, one channel, as ints."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=int)[0]


def png16_rgb(pixels: np.ndarray) -> bytes:
    """A 16-bit RGB PNG (Pillow writes none), from an (H, W, 3) uint16 array."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    height, width = pixels.shape[:2]
    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in pixels)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# --- 3: 16- and 32-bit images are scaled to 8 bits, never clipped ---------------------------------------------

@pytest.mark.parametrize("pixels, fmt", [(GRADIENT.astype(np.uint16), "PNG"),        # I;16
                                         (GRADIENT.astype(np.int32) - 30000, "TIFF"),  # I, negatives too
                                         ((GRADIENT / 65535).astype(np.float32), "TIFF"),  # F, 0-1
                                         ((GRADIENT * 3.5 - 7).astype(np.float32), "TIFF")])
@pytest.mark.parametrize("out_format", ["keep", "jpeg"])
def test_a_deep_image_is_scaled_to_8_bits_keeping_its_order_and_levels(pixels, fmt, out_format):
    kept = ImageResize(512, format=out_format)(PackSample("k", 0, {"png": encoded(pixels, fmt)}))
    (data,) = kept.sample.fields.values()
    assert Image.open(io.BytesIO(data)).mode == "L"
    row = levels_along_a_row(data)
    assert len(np.unique(row)) >= 240 and row[0] <= 1 and row[-1] >= 253  # clipped: 2 levels, 99.6% at 255
    if out_format == "keep":  # lossless: the order is kept exactly
        assert (np.diff(row) >= 0).all()


def test_a_16_bit_rgb_png_is_read_at_8_bits_with_its_levels():
    pixels = np.repeat(GRADIENT.astype(np.uint16)[..., None], 3, axis=2)
    kept = ImageResize(512)(PackSample("k", 0, {"png": png16_rgb(pixels)}))
    row = levels_along_a_row(kept.sample.fields["png"])
    assert len(np.unique(row)) >= 240 and (np.diff(row) >= 0).all()


def test_the_loader_decodes_a_16_bit_image_scaled_not_clipped():
    pixels = np.asarray(open_image(encoded(GRADIENT.astype(np.uint16), "PNG")))
    assert pixels.shape == (8, 1024, 3) and len(np.unique(pixels)) == 256 and (pixels == 255).mean() < 0.01


def test_a_float_image_without_a_range_is_black_not_an_error():
    flat = np.full((4, 4), np.nan, np.float32)
    kept = ImageResize(2)(PackSample("k", 0, {"tif": encoded(flat, "TIFF")}))
    assert np.asarray(Image.open(io.BytesIO(kept.sample.fields["tif"]))).max() == 0


# --- 11: a small animated GIF passes through; one that needs a change is refused -------------------------------

def animated_gif(side: int) -> bytes:
    frames = [Image.new("RGB", (side, side), color) for color in ("red", "blue", "green")]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return out.getvalue()


def test_a_small_animated_gif_is_kept_byte_for_byte():
    data = animated_gif(64)
    kept = ImageResize(256)(PackSample("k", 0, {"gif": data}))
    assert kept.sample.fields["gif"] is data and kept.sizes == {"gif": 64 * 64}
    assert Image.open(io.BytesIO(kept.sample.fields["gif"])).n_frames == 3


@pytest.mark.parametrize("side, out_format", [(300, "keep"), (64, "jpeg")])
def test_an_animated_gif_that_must_change_is_refused(side, out_format):
    with pytest.raises(BadInput, match="'k'.*'gif' is animated \\(3 frames\\)"):
        ImageResize(256, format=out_format)(PackSample("k", 0, {"gif": animated_gif(side)}))


# --- 11: --tokenizer refuses anything but a regular file, unread, and bounds the size ---------------------------

HELD_OPEN = []  # a FIFO's write end, kept open while a thread may still read it (see tokenize_in_a_thread)


def tokenize_in_a_thread(path: str, seconds: float = 10) -> BaseException | None:
    """The error Tokenize(path) raised, run in a daemon thread that may block (the old code opened a FIFO and
    waited for a writer forever, or read /dev/zero forever): a test then fails instead of hanging."""
    outcome = []

    def run():
        try:
            Tokenize(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"Tokenize({path!r}) blocked"
    return outcome[0]


def test_a_tokenizer_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "tokenizer.fifo"
    os.mkfifo(fifo)
    HELD_OPEN.append(os.open(fifo, os.O_RDWR))  # a writer that never writes: a read of the FIFO blocks (GIL released)
    error = tokenize_in_a_thread(str(fifo))
    assert isinstance(error, PackError) and str(error) == f"tokenizer {str(fifo)!r}: not a regular file (a FIFO)"


def test_a_tokenizer_device_is_refused_unread():
    error = tokenize_in_a_thread("/dev/zero")
    assert isinstance(error, PackError) and "not a regular file (a character device)" in str(error)


def test_a_tokenizer_file_above_the_bound_is_refused_unread(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as file:
        file.truncate(MAX_TOKENIZER_BYTES + 1)  # sparse: nothing written
    with pytest.raises(PackError, match=f"^tokenizer .*huge.json': {MAX_TOKENIZER_BYTES + 1:,} bytes, above"):
        Tokenize(str(huge))


# --- 8: a type-confused TFRecord Example is one line naming file, offset and record; the parser raises only ----
#        ValueError whatever the bytes

def framed(example: bytes) -> bytes:
    length = struct.pack("<Q", len(example))
    return length + masked_crc(length) + example + masked_crc(example)


def good_example(i: int) -> bytes:
    parts, _ = encode_example({"image/encoded": b"\xff\xd8" + bytes([i]), "image/text": b"text"}, {"label": i})
    return b"".join(parts)


def confused_example() -> bytes:
    """An Example whose map entry holds an int where the feature's name (bytes) belongs."""
    entry = varint(1 << 3) + varint(5) + _delimited(2, 0)
    features = _delimited(1, len(entry)) + entry
    return _delimited(1, len(features)) + features


def test_a_type_confused_example_is_skipped_naming_file_offset_and_record(tmp_path):
    path = tmp_path / "train.tfrecord"
    records = [framed(good_example(0)), framed(confused_example()), framed(good_example(2))]
    path.write_bytes(b"".join(records))
    messages = []
    samples = list(read_unit(Unit("tfrecord", str(path)), features={"jpg": "image/encoded", "label": "label"},
                             on_skip=messages.append))
    assert [sample.key for sample in samples] == ["train/0", "train/2"]
    offset = len(records[0])
    assert messages == [f"skipped {path}: record 1 at byte offset {offset}: not a tf.train.Example "
                        f"(ValueError: a feature's name is not length-delimited)"]
    with pytest.raises(BadInput, match=f"^{path}: record 1 at byte offset {offset}: not a tf.train.Example"):
        list(read_unit(Unit("tfrecord", str(path)), features={"jpg": "image/encoded"}, strict=True))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_example_parser_raises_only_value_error_whatever_the_bytes(data):
    example = bytearray(good_example(data.draw(st.integers(0, 255))))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(example)))
        if data.draw(st.booleans()):
            example[position:position + 1] = data.draw(st.binary(min_size=0, max_size=3))
        else:
            example[position:position] = data.draw(st.binary(min_size=1, max_size=3))
    try:
        features = decode_example(bytes(example))
    except ValueError:
        return
    for values in features.values():
        assert all(isinstance(value, int) or (isinstance(value, tuple) and value[0] <= value[1] <= len(example))
                   for value in values)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_a_record_of_random_bytes_with_valid_crcs_is_skipped_or_read(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("fuzz") / "r.tfrecord"
    path.write_bytes(framed(body) + framed(good_example(1)))
    messages = []
    samples = list(read_unit(Unit("tfrecord", str(path)), features={"jpg": "image/encoded"},
                             on_skip=messages.append))
    assert samples[-1].fields == {"jpg": b"\xff\xd8\x01"} and len(samples) + len(messages) == 2


# --- 5: a Parquet compression bomb is refused from its page headers, before pyarrow decompresses it -------------

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
def test_a_bomb_cell_is_refused_from_its_page_header_naming_file_row_group_and_column(tmp_path):
    path = bomb(tmp_path / "bomb.parquet", 8 << 20)
    assert os.path.getsize(path) < 8 << 10
    messages = []
    assert list(read_unit(Unit("parquet", path, 0, 0, 1), columns={"txt": "txt"}, on_skip=messages.append,
                          max_cell_bytes=1 << 20)) == []
    (message,) = messages
    assert re.fullmatch(f"skipped {re.escape(path)}: row group 0: column 'txt': the page at byte offset 4 holds 1 "
                        r"value\(s\) in 8,388,6\d\d bytes, one at least above the limit of 1,048,576 "
                        r"\(--max-sample-bytes\); not decompressed", message)  # the cell, its length and levels
    with pytest.raises(BadInput, match=f"^{path}: row group 0: column 'txt': the page"):
        list(read_unit(Unit("parquet", path, 0, 0, 1), columns={"txt": "txt"}, strict=True, max_cell_bytes=1 << 20))


def test_a_large_row_group_of_small_cells_is_read_whole(tmp_path):
    path = tmp_path / "small.parquet"
    rows = [bytes([i % 251]) * 3000 for i in range(2000)]  # 6 MB, above the cell limit, pages of up to 1024 rows
    pq.write_table(pa.table({"txt": rows}), path)
    messages = []
    samples = list(read_unit(Unit("parquet", str(path), 0, 0, 2000), columns={"txt": "txt"},
                             on_skip=messages.append, max_cell_bytes=4000))
    assert messages == [] and [sample.fields["txt"] for sample in samples] == rows


def test_a_page_above_the_memory_budget_is_refused(tmp_path):
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"txt": [bytes(3000)] * 1000}), path, use_dictionary=False, data_page_size=8 << 20)
    messages = []
    assert list(read_unit(Unit("parquet", str(path), 0, 0, 1000), columns={"txt": "txt"},
                          on_skip=messages.append, max_row_group_bytes=1 << 20)) == []
    assert len(messages) == 1 and "column 'txt': the page at byte offset 4 is 3,00" in messages[0]
    assert messages[0].endswith("with the pages read beside it, above max_row_group_bytes=1048576; not decompressed")


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("head_read", [16, 4096])  # 16: every header is read a second time, longer
def test_page_headers_account_for_every_value_of_a_chunk(version, head_read, monkeypatch):
    from corgi_io.packing.sources import parquet_pages

    monkeypatch.setattr(parquet_pages, "HEAD_READ", head_read)
    out = io.BytesIO()
    table = pa.table({"a": [bytes([i % 250 + 1]) * 3000 for i in range(1500)],  # headers with 3 KB min/max
                      "b": list(range(1500)), "c": [None if i % 3 else "x" * i for i in range(1500)]})
    pq.write_table(table, out, data_page_version=version, row_group_size=1000)
    metadata = pq.ParquetFile(out).metadata
    for group in range(metadata.num_row_groups):
        for column in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(column)
            start = min(offset for offset in (chunk.dictionary_page_offset, chunk.data_page_offset) if offset)
            found = list(parquet_pages.pages(out, start, chunk.total_compressed_size))
            data_pages = found[1:] if chunk.has_dictionary_page else found
            assert sum(page.values for page in data_pages) == chunk.num_values
            assert sum(page.uncompressed for page in found) < chunk.total_uncompressed_size  # less the headers


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_a_page_header_of_any_bytes_is_read_or_a_value_error(data):
    from corgi_io.packing.sources.parquet_pages import pages

    try:
        list(pages(io.BytesIO(data), 0, len(data)))
    except ValueError as exc:
        assert str(exc).startswith("byte offset ")


@pytest.mark.slow
@pytest.mark.parametrize("claimed", [None, 1024])  # 1024: the footer says 1 KiB uncompressed, to skip the walk
def test_a_pack_of_a_200_mb_bomb_stays_far_below_the_cell_in_memory(tmp_path, claimed):
    """Before: the cell was decompressed (and copied) before --max-sample-bytes skipped it: 888 MB peak RSS; and
    with the footer understating it, 694 MiB after the first fix."""
    cell = 200 << 20
    source = tmp_path / "source"
    source.mkdir()
    bomb(source / "bomb.parquet", cell, claimed)
    peak, stderr = pack_peak(source, tmp_path / "out")
    assert peak < cell // 2, f"peak RSS {peak >> 20} MiB"  # after: 80 MiB
    assert "column 'txt': the page at byte offset 4 holds 1 value(s)" in stderr

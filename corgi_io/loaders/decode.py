"""Turning a sample's payload bytes into what training code wants.

"pil" and "rgb" decode images, "text" UTF-8 text, "tokens" the ids of a ``.npy`` field (`token_ids`),
"video" a clip of frames (`VideoDecoder`, PyAV, in memory), and "auto" (`AutoDecoder`) picks one of those by the sample's `kind`, for
packs that mix images, videos and texts.  A mapping from field name to any of those
(``{"jpg": "rgb", "txt": "text"}``, `FieldDecoders`) decodes each named field of a sample, the
primary one (``data``) included; fields it does not name stay bytes.  A built-in decoder of one kind has `name` and `kind`:
the dataset refuses a sample of another kind with a DecodeError that says so, before decoding.

Image decoders refuse a decompression bomb before they allocate: the header gives the size, and
an image of more than `max_pixels` pixels is refused (`corgi_io.images.pillow`).  `ImageDecoder`
(`corgi_io.loaders.image_decoder`) decodes, crops and resizes in one pass, into the batch.
A decoder raises DecodeError for what it refuses and whatever its library raises otherwise;
the dataset turns any failure into a DecodeError naming the shard, byte offset, key and kind.
"""
from __future__ import annotations

import dataclasses
import io
import threading

import numpy as np
import torch
from PIL import Image

from corgi_io.arguments import check_at_least
from corgi_io.errors import ArgumentError, DecodeError
from corgi_io.images.pillow import open_image
from corgi_io.manifest import DEFAULT_MAX_PIXELS  # Pillow's decompression-bomb limit, also pack's

from corgi_io.loaders.video import VideoDecoder

NAMES = ["auto", "pil", "rgb", "text", "tokens", "video"]


def rgb_tensor(image: Image.Image) -> torch.Tensor:
    """A decoded image as a uint8 (H, W, 3) tensor."""
    return torch.from_numpy(np.array(image, dtype=np.uint8))


_NPY_LOAD = threading.Lock()  # np.load parses the header with ast.literal_eval, which two threads at once (reading
# threads: `token_pieces`) can break on CPython before 3.11.8: "AST constructor recursion depth mismatch" (gh-106905)


def token_ids(data, sample: dict) -> torch.Tensor:
    """decode="tokens": the token ids of a ``.npy`` field (a 1-D integer array, as the pack-time tokenizer
    writes ``tokens.npy``) as an int64 tensor; read with allow_pickle=False, so a pickled array is refused."""
    try:
        with _NPY_LOAD:
            ids = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # what np.load raises for bytes that are not a .npy array
        raise DecodeError(f"sample {sample['key']!r}: not a .npy array of token ids ({exc})") from None
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise DecodeError(f"sample {sample['key']!r}: token ids must be a 1-D integer array, got {ids.dtype} "
                          f"of shape {ids.shape}")
    return torch.from_numpy(ids.astype(np.int64))


@dataclasses.dataclass(frozen=True)
class KindDecoder:
    """decode='pil' (an RGB PIL image), 'rgb' (a uint8 (H, W, 3) tensor) or 'text' (a str); it decodes `kind`."""

    name: str
    max_pixels: int | None = DEFAULT_MAX_PIXELS

    @property
    def kind(self) -> str:
        return "text" if self.name == "text" else "image"

    def __call__(self, data: bytes, sample: dict):
        if self.name == "text":
            return data.decode("utf-8")
        image = open_image(data, self.max_pixels)
        return image if self.name == "pil" else rgb_tensor(image)


@dataclasses.dataclass(frozen=True)
class AutoDecoder:
    """decode= for mixed packs, by the sample's kind: image -> uint8 (H, W, 3) RGB tensor, video -> clip, text -> str.

    `video` sets the clip options (`AutoDecoder(video=VideoDecoder(frames=16))`); `max_pixels`
    bounds the images.
    """

    video: VideoDecoder = VideoDecoder()
    max_pixels: int | None = DEFAULT_MAX_PIXELS

    def __post_init__(self):
        check_at_least("max_pixels", self.max_pixels, 1)

    def for_epoch(self, seed: int, epoch: int) -> AutoDecoder:
        return dataclasses.replace(self, video=self.video.for_epoch(seed, epoch))

    def __call__(self, data: bytes, sample: dict):
        kind = sample["kind"]
        if kind == "video":
            return self.video(data, sample)
        return rgb_tensor(open_image(data, self.max_pixels)) if kind == "image" else data.decode("utf-8")


@dataclasses.dataclass(frozen=True)
class FieldDecoders:
    """decode={"jpg": "rgb", "txt": "text"}: one decoder per field name, as `decoders` ((name, decoder), ...)."""

    decoders: tuple

    def for_epoch(self, seed: int, epoch: int) -> FieldDecoders:
        return FieldDecoders(tuple((name, epoch_decoder(decoder, seed, epoch)) for name, decoder in self.decoders))


def get_decoder(decode, max_pixels: int | None = DEFAULT_MAX_PIXELS):
    """None (raw bytes), 'pil' (RGB PIL image), 'rgb' (uint8 HxWx3 tensor), 'text' (str),
    'video' (uint8 TxHxWx3 tensor of 8 frames: `VideoDecoder`), 'auto' (by kind: `AutoDecoder`),
    'tokens' (an int64 tensor of the ids in a ``.npy`` field: `token_ids`),
    or a callable(data, sample), such as `VideoDecoder(frames=16, clip="random")`; or a mapping from field
    name to any of those (`FieldDecoders`).

    `max_pixels` bounds 'pil', 'rgb', and the frames x H x W of a 'video' clip (None: no bound
    beyond Pillow's own).
    """
    if decode is None or callable(decode):
        return decode
    if isinstance(decode, dict):
        if not all(isinstance(name, str) for name in decode):
            raise ArgumentError(f"decode's field names must be strings, got {sorted(map(repr, decode))}")
        return FieldDecoders(tuple((name, get_decoder(value, max_pixels)) for name, value in decode.items()))
    if decode == "video":
        return VideoDecoder(max_pixels=max_pixels)
    if decode == "auto":
        return AutoDecoder(VideoDecoder(max_pixels=max_pixels), max_pixels)
    if decode == "tokens":
        return token_ids
    if decode not in NAMES:
        raise ArgumentError(f"decode must be None, a callable, or one of {NAMES}, got {decode!r}")
    return KindDecoder(decode, max_pixels)


def epoch_decoder(decode, seed: int, epoch: int):
    """The decoder to use this epoch: `decode.for_epoch(seed, epoch)` where it has one (random clips), else `decode`."""
    for_epoch = getattr(decode, "for_epoch", None)
    return decode if for_epoch is None else for_epoch(seed, epoch)

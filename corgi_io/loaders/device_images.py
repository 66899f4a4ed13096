"""Images decoded on the accelerator: ``ImageDecoder(device="cuda")`` (nvJPEG through torchvision).

DataLoader workers cannot use CUDA (they are forked from the trainer), so with a device other than "cpu"
the workers do not decode: each batch's image bytes cross to the training process as they were read
(the raw-bytes batch path, `fast_batches`), wrapped in `EncodedImages`, and are decoded there:

- on a CUDA device, every plain JPEG of the batch in one `torchvision.io.decode_jpeg(..., device=device)`
  call (nvJPEG's batched decode); images that are not plain JPEG (PNG, WebP, CMYK JPEG), and every image
  for another device (a CPU: the tests), decode on the CPU (the decoder's `jpeg_decoder`, else Pillow),
  then move;
- per image, the crop (a view of the decoded image), one antialiased bilinear resize
  (`torch.nn.functional.interpolate`) and the flip, into one (B, H, W, 3) uint8 tensor on the device.

Crops and flips are the CPU path's: the same (seed, epoch, index) draws and the same boxes
(`corgi_io.images.crops`), so the two paths crop alike and resume alike; their pixels differ by the
decoders' and resizers' rounding.  The `max_pixels` guard reads each header (`image_header`) before any
pixel is decoded.  ``to_device(loader, "cuda")`` decodes each batch on its side stream, one batch ahead;
without it, ``batch["data"].decode()``.  A broken image raises `DecodeError` naming its key (`on_error`
applies where samples are decoded one by one, in the workers).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from corgi_io.errors import ArgumentError, DecodeError
from corgi_io.images.fused import JPEG_DECODERS, image_header
from corgi_io.images.pillow import open_image


@dataclasses.dataclass
class EncodedImages:
    """A batch's images as read (`payloads`, a `PackedBytes`), with what decoding them needs: each sample's `index`
    (its crop's draws) and `key` (errors name it), and the epoch's `ImageDecoder`.  `decode()` makes the batch."""

    payloads: object
    indices: np.ndarray
    keys: list
    decoder: object

    def __len__(self) -> int:
        return len(self.indices)

    def decode(self, device=None) -> torch.Tensor:
        """The (B, H, W, 3) uint8 batch on `device` (default: the decoder's)."""
        return decode_batch(self.decoder, list(self.payloads), self.indices, self.keys,
                            torch.device(device or self.decoder.device))


def decode_batch(decoder, payloads: list, indices, keys: list, device: torch.device) -> torch.Tensor:
    """`decoder`'s crops of `payloads` (images of samples `indices`, named `keys`), resized and flipped, as one
    (B, H, W, 3) uint8 tensor on `device`.  O(B) kernel launches: a crop, a resize and a copy per image."""
    sizes = np.array([_header(decoder, data, key) for data, key in zip(payloads, keys)], dtype=np.int64).reshape(-1, 3)
    draws = decoder.draws(np.asarray(indices, dtype=np.int64))  # the CPU path's crops and flips
    xs, ys, ws, hs = (np.asarray(v).tolist() for v in decoder.boxes(draws, sizes[:, 0], sizes[:, 1]))
    flipped = decoder.flips(draws).tolist()
    out = torch.empty((len(payloads), *decoder.shape), dtype=torch.uint8, device=device)
    for i, image in enumerate(_decoded(decoder, payloads, sizes, keys, device)):
        crop = image[None, :, ys[i]:ys[i] + hs[i], xs[i]:xs[i] + ws[i]].float()
        resized = torch.nn.functional.interpolate(crop, size=decoder.size, mode="bilinear", antialias=True,
                                                  align_corners=False)[0]
        if flipped[i]:
            resized = resized.flip(-1)
        out[i] = resized.round_().clamp_(0, 255).permute(1, 2, 0)
    return out


def _header(decoder, data: bytes, key) -> tuple:
    """(width, height, whether torchvision's JPEG decoder takes it), checked against `max_pixels` unread."""
    try:
        width, height, plain_jpeg = image_header(data, decoder.max_pixels)
    except Exception as exc:  # DecodeError, or what Pillow raises for bytes that are no image: name the sample
        reason = str(exc) if isinstance(exc, DecodeError) else f"cannot decode ({type(exc).__name__}: {exc})"
        raise DecodeError(f"sample {key!r} (image): {reason}", key=key) from None
    return width, height, int(plain_jpeg)


def _decoded(decoder, payloads: list, sizes: np.ndarray, keys: list, device: torch.device) -> list:
    """Each image as a (3, height, width) uint8 tensor on `device`: on a CUDA device the plain JPEGs in one nvJPEG
    call; the rest (and everything for another device) on the CPU, then moved."""
    jpegs = np.flatnonzero(sizes[:, 2]).tolist() if device.type == "cuda" else []
    images = dict(zip(jpegs, _nvjpeg(payloads, jpegs, keys, device)))
    for i in range(len(payloads)):
        if i not in images:
            images[i] = torch.from_numpy(_cpu_rgb(decoder, payloads[i], sizes[i], keys[i])).permute(2, 0, 1).to(device)
    return [images[i] for i in range(len(payloads))]


def _cpu_rgb(decoder, data: bytes, size: np.ndarray, key) -> np.ndarray:
    """The image as a full-size (height, width, 3) uint8 array: the decoder's JPEG library, else Pillow."""
    width, height, plain_jpeg = size.tolist()
    try:
        if plain_jpeg:
            return JPEG_DECODERS[decoder.jpeg_decoder](data, width, height, 1)
        return np.array(open_image(data, None))  # max_pixels was checked on the header; writable, for torch
    except Exception as exc:  # each library raises its own: name the sample
        raise DecodeError(f"sample {key!r} (image): {exc}", key=key) from None


def _nvjpeg(payloads: list, jpegs: list, keys: list, device: torch.device) -> list:
    """`payloads[jpegs]` decoded on `device` in one `torchvision.io.decode_jpeg` call (nvJPEG's batched decode)."""
    if not jpegs:
        return []
    try:
        import torchvision.io as tv_io
    except ImportError as exc:
        raise ArgumentError(f"ImageDecoder(device={str(device)!r}) decodes with torchvision's nvJPEG: pip install "
                            f"torchvision (the build that matches torch) ({exc})") from None
    encoded = [torch.frombuffer(bytearray(payloads[i]), dtype=torch.uint8) for i in jpegs]
    try:
        return tv_io.decode_jpeg(encoded, mode=tv_io.ImageReadMode.RGB, device=device)
    except RuntimeError as exc:  # one broken JPEG fails the call: name the first that fails alone
        for i, data in zip(jpegs, encoded):
            try:
                tv_io.decode_jpeg(data, mode=tv_io.ImageReadMode.RGB, device=device)
            except RuntimeError as broken:
                raise DecodeError(f"sample {keys[i]!r} (image): {broken}", key=keys[i]) from None
        raise DecodeError(f"a batch of {len(jpegs)} JPEGs failed to decode on {device}: {exc}") from None

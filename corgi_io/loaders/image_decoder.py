"""`ImageDecoder`: decode, crop, resize and flip an image in one pass, straight into its batch.

``decode=ImageDecoder(size=224, crop="random_resized", flip=True)`` yields uint8 (H, W, 3) RGB
tensors (channels last), where ``decode="pil"`` plus a torchvision transform would make a full-size
PIL image, crop it, resize it and stack a tensor per sample.  The pass itself is
`corgi_io.images.fused.decode_crop_resize`: DCT-domain scaling of JPEGs by 1/2, 1/4 or 1/8 when the
crop allows it, one OpenCV resize of the crop's view, an in-place flip.  The crop rules and their
draws are `corgi_io.images.crops`: a sample's crop and flip are a function of (seed, epoch, sample
index), so they are reproducible, change every epoch, and survive resume and elastic resume.

With ``batching=Batches(B)`` the dataset gives each batch one preallocated (B, H, W, 3) tensor (`BatchSlots`):
every sample is resized into its own row of it, and the default collate takes the rows as the batch
without stacking them (`corgi_io.loaders.collate`).  In a DataLoader worker that tensor is made in shared
memory, so it crosses to the trainer without another copy, and the worker fills it again once the trainer
has dropped that batch (`corgi_io.loaders.shared_memory`).  OpenCV's thread count is left alone: in a worker
forked after the parent used OpenCV's thread pool, `cv2.setNumThreads` hangs (its resize does not).
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import torch

from corgi_io.arguments import check_at_least, choose
from corgi_io.errors import ArgumentError
from corgi_io.images.crops import CROPS, draw_numbers, flips, sample_uniforms
from corgi_io.images.fused import JPEG_DECODERS, decode_crop_resize, default_jpeg_decoder
from corgi_io.loaders.collate import INLINE_BYTES
from corgi_io.loaders.decode import FieldDecoders
from corgi_io.loaders.shared_memory import WORKER_BUFFERS
from corgi_io.manifest import DEFAULT_MAX_PIXELS

_DRAWS = draw_numbers()


@dataclasses.dataclass(frozen=True)
class ImageDecoder:
    """decode= for images: a uint8 (H, W, 3) tensor of the crop (`crop`: "random_resized", "center" or "none")
    resized to `size` (an int for a square, or (height, width)), flipped left to right with probability 1/2 if
    `flip`.  `scale` and `ratio` are RandomResizedCrop's area share and aspect ratio ranges; `jpeg_decoder` names
    an entry of `corgi_io.images.fused.JPEG_DECODERS` (None: simplejpeg where installed, else OpenCV);
    `max_pixels` refuses larger images before any pixel is decoded.  The dataset calls `for_epoch(seed, epoch)`.
    `device`: "cpu" decodes in the DataLoader workers; another (such as "cuda") leaves the bytes to the training
    process, which decodes each batch there with torchvision (nvJPEG on a GPU: `corgi_io.loaders.device_images`)."""

    name: ClassVar[str] = "ImageDecoder"
    kind: ClassVar[str] = "image"

    size: int | tuple = 224
    crop: str = "random_resized"
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3 / 4, 4 / 3)
    flip: bool = True
    jpeg_decoder: str | None = None
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    seed: int = 0
    epoch: int = 0
    device: str = "cpu"

    def __post_init__(self):
        size = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        if len(size) != 2:
            raise ArgumentError(f"ImageDecoder size must be an int or (height, width), got {self.size!r}")
        for side in size:
            check_at_least("ImageDecoder size", side, 1, optional=False)
        object.__setattr__(self, "size", size)
        choose("crop", self.crop, CROPS)
        for name, (low, high) in (("scale", self.scale), ("ratio", self.ratio)):
            if not 0 < low <= high:
                raise ArgumentError(f"ImageDecoder {name} must be (low, high) with 0 < low <= high, got {(low, high)}")
        if self.scale[1] > 1:
            raise ArgumentError(f"ImageDecoder scale is a share of the image's area, at most 1, got {self.scale}")
        object.__setattr__(self, "jpeg_decoder", self.jpeg_decoder or default_jpeg_decoder())
        choose("jpeg_decoder", self.jpeg_decoder, JPEG_DECODERS)
        check_at_least("max_pixels", self.max_pixels, 1)
        self._check_device()

    def _check_device(self) -> None:
        try:
            device = torch.device(self.device)
        except (RuntimeError, TypeError) as exc:
            raise ArgumentError(f"ImageDecoder device {self.device!r} is not a torch device ({exc})") from None
        object.__setattr__(self, "device", str(device))  # torchvision, for nvJPEG, is needed where it decodes

    @property
    def on_device(self) -> bool:
        """Whether batches are decoded in the training process on `device` (not in the workers, on the CPU)."""
        return self.device != "cpu"

    def for_epoch(self, seed: int, epoch: int) -> ImageDecoder:
        """This decoder with the dataset's seed and epoch (the crops' and flips' draws)."""
        return dataclasses.replace(self, seed=int(seed), epoch=int(epoch))

    @property
    def shape(self) -> tuple:
        """(height, width, 3): one decoded image."""
        return (*self.size, 3)

    def draws(self, indices) -> np.ndarray:
        """The uniform draws of samples `indices` this epoch, from which their crops and flips follow."""
        return sample_uniforms(self.seed, self.epoch, indices, _DRAWS)

    def boxes(self, draws: np.ndarray, widths, heights) -> tuple:
        """(x, y, w, h) arrays: the crops, for `draws`, of images of `widths` x `heights` (`crops.CROPS`)."""
        return CROPS[self.crop](widths, heights, self.size, draws, self.scale, self.ratio)

    def flips(self, draws: np.ndarray) -> np.ndarray:
        """Per sample of `draws`, whether its image is flipped left to right."""
        return flips(draws) & self.flip

    def decode_into(self, data: bytes, sample: dict, out: np.ndarray) -> np.ndarray:
        """Decode `data` (the image of `sample`, whose "index" seeds its crop) into `out`, a uint8 array of `shape`."""
        draws = self.draws([int(sample["index"])])

        def box_of(width: int, height: int) -> tuple:
            return tuple(int(side[0]) for side in self.boxes(draws, [width], [height]))

        return decode_crop_resize(data, box_of, out, bool(self.flips(draws)[0]), max_pixels=self.max_pixels,
                                  jpeg_decoder=self.jpeg_decoder)

    def __call__(self, data: bytes, sample: dict) -> torch.Tensor:
        return torch.from_numpy(self.decode_into(data, sample, np.empty(self.shape, dtype=np.uint8)))


class BatchSlots:
    """An `ImageDecoder` that decodes the samples of each batch of `rows` into the rows of one (rows, H, W, 3) tensor.

    Sample i of the worker's epoch goes to row i % rows of the batch it belongs to, which holds because a worker's
    batches are whole (`collated_batches`): a sample that fails still takes its row, so the next ones keep theirs.
    """

    def __init__(self, decoder: ImageDecoder, rows: int):
        self.decoder, self.rows, self.next, self.slab = decoder, rows, rows, None
        self.kind, self.name = decoder.kind, decoder.name  # the dataset's kind check sees the decoder's

    def __call__(self, data: bytes, sample: dict) -> torch.Tensor:
        row = self.skip_row()
        self.decoder.decode_into(data, sample, row.numpy())
        return row

    def skip_row(self) -> torch.Tensor:
        """The next row, taken (also for a sample refused before decoding: the next ones keep their rows)."""
        if self.next == self.rows:
            self.slab, self.next = _new_slab((self.rows, *self.decoder.shape)), 0
        row, self.next = self.slab[self.next], self.next + 1
        return row


def _new_slab(shape: tuple) -> torch.Tensor:
    """An uninitialised uint8 tensor; inside a DataLoader worker, one large enough to cross worker queues through
    shared memory (`collate.INLINE_BYTES`) is over shared memory the worker reuses once the trainer drops the batch
    (`WORKER_BUFFERS`): the worker queue would otherwise copy it into fresh shared memory."""
    if torch.utils.data.get_worker_info() is None or math.prod(shape) < INLINE_BYTES:
        return torch.empty(shape, dtype=torch.uint8)
    return WORKER_BUFFERS.tensor(shape)


def batch_slots(decode, rows: int):
    """`decode` with each `ImageDecoder` (itself, or one of a FieldDecoders' fields) decoding into `BatchSlots`."""
    if isinstance(decode, ImageDecoder):
        return BatchSlots(decode, rows)
    if isinstance(decode, FieldDecoders):
        return FieldDecoders(tuple((name, batch_slots(each, rows)) for name, each in decode.decoders))
    return decode

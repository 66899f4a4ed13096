"""Video clips from a sample's bytes: T frames as a uint8 (T, H, W, 3) RGB tensor, decoded in memory with PyAV.

PyAV (`pip install 'corgi-io[video]'`) is imported only when a video is decoded.  The bytes are
opened from memory (`av.open(io.BytesIO(data))`); no temporary file is written.

Which frames: the video's n frames are cut into T equal segments and one frame is taken from
each.  ``clip="uniform"`` takes each segment's middle frame (the same clip every epoch);
``clip="random"`` takes a random frame in each segment (TSN-style), drawn from
``numpy.random.default_rng([seed, epoch, sample index])``, so a clip is reproducible and
changes from epoch to epoch.  A video shorter than T frames repeats its frames in order
(each held for about T/n clip frames, like a slowed-down video); it is never padded with blank
frames.  Frames are decoded in order up to the last one the clip needs.

Threads: inter-coded videos decode with FFmpeg's frame threads (joined when the container
closes); intra-only ones (MJPEG) decode only the frames the clip needs.  The RGB conversion uses
one converter per clip, on one thread: a converter with a thread pool that is still referenced
(by a traceback, say) when a DataLoader forks its workers hangs the worker that frees it.

Memory bound: before any frame is decoded, a clip whose T x H x W (from the stream header)
exceeds `max_pixels` is refused, so the clip never holds more than 3 * max_pixels bytes.
"""
from __future__ import annotations

import dataclasses
import io
from typing import ClassVar

import numpy as np
import torch
from PIL import Image

from corgi_io.arguments import check_at_least, choose
from corgi_io.errors import DecodeError

CLIP_MODES = ("uniform", "random")


def frame_indices(total: int, frames: int, clip: str, rng: np.random.Generator | None = None) -> np.ndarray:
    """The `frames` frame numbers (non-decreasing, in [0, total)) a clip takes from a video of `total` frames."""
    offsets = np.full(frames, 0.5) if clip == "uniform" else rng.random(frames)
    indices = np.floor((np.arange(frames) + offsets) * total / frames).astype(np.int64)
    return np.minimum(indices, total - 1)


def _frame_count(data: bytes, stream) -> int:
    """Frames in the video stream: the header's count, else its packets counted by demuxing (no decoding)."""
    if stream.frames > 0:
        return int(stream.frames)
    import av

    with av.open(io.BytesIO(data)) as container:
        return sum(1 for packet in container.demux(video=0) if packet.size)


def _numbered_frames(container, stream, needed: set):
    """(frame number, decoded frame or None) of every frame in order: None for one skipped undecoded.

    An intra-only codec (MJPEG, raw video) codes every frame alone in one packet, so only the
    frames in `needed` are decoded.  Other codecs decode every frame (frame-threaded), since a
    frame depends on the frames before it.
    """
    if not stream.codec_context.codec.intra_only:
        stream.thread_type = "AUTO"
        yield from enumerate(container.decode(stream))
        return
    for number, packet in enumerate(packet for packet in container.demux(stream) if packet.size):
        if number not in needed:
            yield number, None
            continue
        decoded = packet.decode()
        if len(decoded) != 1:
            raise DecodeError(f"frame {number}: an intra-only packet decoded to {len(decoded)} frames")
        yield number, decoded[0]


def read_clip(data: bytes, frames: int, clip: str, max_pixels: int | None, rng=None) -> np.ndarray:
    """Decode the clip's frames from `data` into a (frames, H, W, 3) uint8 array (see the module docstring).

    Raises DecodeError for a clip above `max_pixels`, a video without a video stream or frames,
    or one that ends before the frames its header promised; PyAV's errors pass through.
    """
    import av
    from av.video.reformatter import VideoReformatter

    with av.open(io.BytesIO(data)) as container:
        if not container.streams.video:
            raise DecodeError("no video stream")
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        if max_pixels is not None and frames * width * height > max_pixels:
            raise DecodeError(f"a clip of {frames} frames of {width}x{height} is {frames * width * height:,} pixels, "
                             f"above max_pixels={max_pixels:,}")
        total = _frame_count(data, stream)
        if total < 1 or width < 1 or height < 1:
            raise DecodeError(f"video stream of {total} frames of {width}x{height}")
        indices = frame_indices(total, frames, clip, rng)
        out = np.empty((frames, height, width, 3), dtype=np.uint8)
        to_rgb = VideoReformatter()  # one converter per clip, one thread: see the module docstring
        number = -1
        for number, frame in _numbered_frames(container, stream, set(indices.tolist())):
            lo, hi = np.searchsorted(indices, (number, number + 1)).tolist()  # the clip slots showing this frame
            if hi > lo:
                if (frame.width, frame.height) != (width, height):
                    raise DecodeError(f"frame {number} is {frame.width}x{frame.height}, the stream {width}x{height}")
                out[lo:hi] = to_rgb.reformat(frame, format="rgb24", threads=1).to_ndarray()
            if number == indices[-1]:
                return out
    raise DecodeError(f"the video ends after {number + 1} frames; its header says {total}")


@dataclasses.dataclass(frozen=True)
class VideoDecoder:
    """decode= for videos: a uint8 tensor (frames, H, W, 3), RGB; see the module docstring for the clip rules.

    `max_pixels` bounds frames x H x W (Pillow's image limit by default).  The dataset calls
    `for_epoch(seed, epoch)` at each iteration, which fixes the random clips' stream, and refuses
    a sample whose `kind` is not "video" before calling it.
    """

    name: ClassVar[str] = "video"
    kind: ClassVar[str] = "video"

    frames: int = 8
    clip: str = "uniform"
    max_pixels: int | None = Image.MAX_IMAGE_PIXELS
    seed: int = 0
    epoch: int = 0

    def __post_init__(self):
        check_at_least("frames", self.frames, 1, optional=False)
        choose("clip", self.clip, CLIP_MODES)
        check_at_least("max_pixels", self.max_pixels, 1)

    def for_epoch(self, seed: int, epoch: int) -> VideoDecoder:
        """This decoder with the dataset's seed and epoch (the random clips' stream)."""
        return dataclasses.replace(self, seed=int(seed), epoch=int(epoch))

    def __call__(self, data: bytes, sample: dict) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, self.epoch, int(sample["index"])]) if self.clip == "random" else None
        return torch.from_numpy(read_clip(data, self.frames, self.clip, self.max_pixels, rng))

"""Video clip decoding: decode="video" (PyAV, in memory) against the temp-file OpenCV recipe, clips/s.

The recipe users wrote before decode="video" existed: a callable decode= that writes the
sample's bytes to a `NamedTemporaryFile(suffix=...)`, opens it with `cv2.VideoCapture`, and
keeps T frames (here the same frames as the uniform clip: `grab()` skips, `retrieve()` keeps,
then BGR -> RGB).  Both go through the same CorgiPileDataset over the same pack, so the loader's
cost is common and the ratio is the decoders'.  One pack per container (mp4v .mp4, MJPG .avi),
written by OpenCV's VideoWriter; each measurement is whole epochs, the contenders interleaved,
median of --rounds rounds.

    python bench/video_decode.py [--videos 48] [--frames-per-video 64] [--clip-frames 8] [--rounds 5]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _timing import interleaved_medians  # noqa: E402
from helpers.corpus_factory import write_video  # noqa: E402


def make_pack(workdir: Path, ext: str, videos: int, frames: int, width: int, height: int) -> Path:
    """A pack of `videos` OpenCV-written videos of `frames` frames (reused when already built)."""
    from corgi_io import PackOptions, pack

    out = workdir / f"pack-{ext}-{videos}-{frames}-{width}x{height}"
    if not (out / "manifest.json").exists():
        source = workdir / f"corpus-{ext}-{videos}-{frames}-{width}x{height}"
        for i in range(videos):
            if not (source / "clips" / f"v{i:04d}.{ext}").exists():
                write_video(source / "clips" / f"v{i:04d}.{ext}", frames, width, height)
        pack(source, out, PackOptions(), overwrite=True, progress=False)
    return out


def opencv_tempfile_decoder(clip_frames: int):
    """The temp-file recipe as a decode= callable: a (T, H, W, 3) RGB uint8 array of the uniform clip's frames."""
    from corgi_io.loaders.video import frame_indices

    def decode(data: bytes, sample: dict) -> np.ndarray:
        with tempfile.NamedTemporaryFile(suffix=f".{sample['ext']}") as f:
            f.write(data)
            f.flush()
            capture = cv2.VideoCapture(f.name)
            try:
                wanted = frame_indices(int(capture.get(cv2.CAP_PROP_FRAME_COUNT)), clip_frames, "uniform").tolist()
                kept = {}
                for number in range(wanted[-1] + 1):
                    if not capture.grab():
                        raise ValueError(f"video ends at frame {number}")
                    if number in wanted:
                        kept[number] = cv2.cvtColor(capture.retrieve()[1], cv2.COLOR_BGR2RGB)
            finally:
                capture.release()
        return np.stack([kept[number] for number in wanted])

    return decode


def epoch_runner(root: Path, decode, epochs: int):
    """A function that iterates `epochs` whole epochs of `root` decoded with `decode`."""
    from corgi_io.loaders import CorgiPileDataset

    dataset = CorgiPileDataset(root, decode=decode)

    def run():
        for _ in range(epochs):
            for _sample in dataset:
                pass

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=48)
    parser.add_argument("--frames-per-video", type=int, default=64)
    parser.add_argument("--size", default="320x240", help="WIDTHxHEIGHT of the videos")
    parser.add_argument("--clip-frames", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2, help="whole epochs per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "video")
    args = parser.parse_args()
    from corgi_io.loaders import VideoDecoder

    width, height = (int(v) for v in args.size.split("x"))
    for ext in ("mp4", "avi"):
        root = make_pack(args.workdir, ext, args.videos, args.frames_per_video, width, height)
        contenders = {f"decode=VideoDecoder(frames={args.clip_frames}) (PyAV, in memory)":
                      VideoDecoder(frames=args.clip_frames),
                      "temp file + cv2.VideoCapture (baseline)": opencv_tempfile_decoder(args.clip_frames)}
        runners = {name: epoch_runner(root, decode, args.epochs) for name, decode in contenders.items()}
        for run in runners.values():
            run()  # warm the page cache and the codecs
        seconds = interleaved_medians(runners, args.rounds)
        baseline = seconds["temp file + cv2.VideoCapture (baseline)"]
        clips = args.videos * args.epochs
        for name, value in seconds.items():
            print(f"video_decode {ext} {args.videos}x{args.frames_per_video}f {args.size} T={args.clip_frames} "
                  f"{name:48s} {clips / value:8.1f} clips/s ratio {baseline / value:5.2f}x vs temp-file OpenCV "
                  f"(median of {args.rounds} interleaved rounds)")


if __name__ == "__main__":
    main()

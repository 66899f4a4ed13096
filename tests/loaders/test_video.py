"""decode="video": clips of T frames decoded in memory with PyAV from mp4 (mp4v) and avi (MJPG) written by OpenCV.

Which frames a clip holds is checked against OpenCV's own decoding of the same file: every clip
frame must be closest to the frame the clip rules name (the videos' frames differ clearly).
"""
from __future__ import annotations

import resource

import cv2
import numpy as np
import pytest
import torch

from corgi_io import ArgumentError, DecodeError, PackOptions, pack
from corgi_io.loaders import CorgiPileDataset, Decoding, VideoDecoder
from corgi_io.loaders.video import frame_indices
from helpers.corpus_factory import write_garbage_video, write_video

pytest.importorskip("av", reason="pip install 'corgi-io[video]'")

VIDEOS = {"clips/long_mp4.mp4": 24, "clips/long_avi.avi": 24, "clips/short_mp4.mp4": 3, "clips/short_avi.avi": 3,
          "clips/one.mp4": 1}  # relpath -> frames; 64x48 each


@pytest.fixture(scope="module")
def video_pack(tmp_path_factory):
    """(pack root, {relpath: OpenCV's RGB frames of that video}) of one pack holding VIDEOS."""
    source = tmp_path_factory.mktemp("video-corpus")
    frames = {}
    for rel, count in VIDEOS.items():
        write_video(source / rel, count)
        frames[rel] = opencv_frames(source / rel)
    out = tmp_path_factory.mktemp("video-pack") / "pack"
    pack(source, out, PackOptions(block_samples=2), progress=False)
    return out, frames


def opencv_frames(path) -> np.ndarray:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame[:, :, ::-1])
    capture.release()
    return np.stack(frames)


def clips(root, **options) -> dict:
    """{relpath (key.ext): sample data} of one epoch."""
    return {f"{s['key']}.{s['ext']}": s["data"] for s in CorgiPileDataset(root, **options)}


def nearest_frames(clip: torch.Tensor, frames: np.ndarray) -> list:
    """For each clip frame, the number of the OpenCV frame it is closest to (mean absolute difference)."""
    diff = np.abs(clip.numpy()[:, None].astype(np.int16) - frames[None].astype(np.int16)).mean(axis=(2, 3, 4))
    assert diff.min(axis=1).max() < 3, "a clip frame matches no frame of the video"
    return diff.argmin(axis=1).tolist()


def test_frame_indices_spread_over_the_video_and_repeat_a_short_one_in_order():
    assert frame_indices(24, 8, "uniform").tolist() == [1, 4, 7, 10, 13, 16, 19, 22]
    assert frame_indices(3, 8, "uniform").tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert frame_indices(1, 4, "uniform").tolist() == [0, 0, 0, 0]
    random = frame_indices(24, 8, "random", np.random.default_rng(0))
    assert [i // 3 for i in random.tolist()] == list(range(8))  # one frame in each segment of 3
    short = frame_indices(3, 8, "random", np.random.default_rng(1)).tolist()
    assert short == sorted(short) and set(short) <= {0, 1, 2}


@pytest.mark.parametrize("frames", [8, 24, 3])
def test_uniform_clips_hold_the_named_frames_of_mp4_and_avi(video_pack, frames):
    root, reference_frames = video_pack
    got = clips(root, decode=VideoDecoder(frames=frames))
    assert set(got) == set(VIDEOS)
    for rel, clip in got.items():
        assert clip.dtype == torch.uint8 and clip.shape == (frames, 48, 64, 3), rel
        assert nearest_frames(clip, reference_frames[rel]) == frame_indices(VIDEOS[rel], frames, "uniform").tolist(), rel


def test_decode_video_defaults_to_8_uniform_frames_the_same_every_epoch(video_pack):
    root, _ = video_pack
    dataset = CorgiPileDataset(root, decode="video")
    first = clips(root, decode="video")
    dataset.set_epoch(3)
    for sample in dataset:
        assert sample["kind"] == "video" and torch.equal(sample["data"], first[f"{sample['key']}.{sample['ext']}"])
    assert all(clip.shape == (8, 48, 64, 3) for clip in first.values())


def random_clips(root, seed: int, epoch: int) -> dict:
    dataset = CorgiPileDataset(root, decode=VideoDecoder(frames=4, clip="random"), seed=seed)
    dataset.set_epoch(epoch)
    return {f"{s['key']}.{s['ext']}": s["data"] for s in dataset}


def test_random_clips_are_reproducible_per_seed_epoch_and_sample_and_vary_across_epochs(video_pack):
    root, reference_frames = video_pack
    first = random_clips(root, seed=5, epoch=1)
    again = random_clips(root, seed=5, epoch=1)
    assert all(torch.equal(first[key], again[key]) for key in first)
    for rel, clip in first.items():
        total, picked = VIDEOS[rel], nearest_frames(clip, reference_frames[rel])
        assert picked == sorted(picked) and all(i * total // 4 <= f < -(-(i + 1) * total // 4)
                                                for i, f in enumerate(picked)), (rel, picked)
    long_keys = [rel for rel in first if rel.startswith("clips/long")]
    for other in (random_clips(root, seed=5, epoch=2), random_clips(root, seed=6, epoch=1)):
        assert any(not torch.equal(first[key], other[key]) for key in long_keys)


def test_a_clip_above_max_pixels_is_refused_before_its_frames_are_decoded(tmp_path):
    write_video(tmp_path / "src" / "big" / "wide.mp4", 1, 1920, 1088)
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(), progress=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with pytest.raises(DecodeError, match=r"'big/wide' \(video\): a clip of 64 frames of 1920x1088 is .* above max_"):
        clips(tmp_path / "pack", decode=VideoDecoder(frames=64))  # 64 x 1920 x 1088 = 134M pixels, 400 MB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before < 100
    (clip,) = clips(tmp_path / "pack", decode=Decoding("video", max_pixels=8 * 1920 * 1088)).values()
    assert clip.shape == (8, 1088, 1920, 3)
    with pytest.raises(DecodeError, match="above max_pixels"):
        clips(tmp_path / "pack", decode=Decoding("video", max_pixels=8 * 1920 * 1088 - 1))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_video_raises_decode_error_naming_key_kind_and_shard(tmp_path, damage):
    video = tmp_path / "src" / "bad" / "clip.avi"
    if damage == "garbage":
        write_garbage_video(video)
    else:
        write_video(video, 12)
        video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    pack(tmp_path / "src", tmp_path / "pack", PackOptions(size_fn="os.path:getsize"), progress=False)
    with pytest.raises(DecodeError) as info:
        clips(tmp_path / "pack", decode="video")
    message = str(info.value)
    assert "sample 'bad/clip' (video): " in message and "shard-000000.tar: byte offset" in message, message
    assert "\n" not in message and info.value.key == "bad/clip"


def test_video_decoder_options_are_checked():
    with pytest.raises(ArgumentError, match="clip must be one of"):
        VideoDecoder(clip="middle")
    for frames, message in ((0, "frames must be >= 1, got 0"), (2.0, "frames must be an int >= 1, got 2.0")):
        with pytest.raises(ArgumentError, match=message):
            VideoDecoder(frames=frames)
    with pytest.raises(ArgumentError, match="max_pixels must be >= 1 or None, got 0"):
        VideoDecoder(max_pixels=0)


@pytest.mark.slow
def test_random_clips_are_the_same_in_dataloader_workers_as_in_process(video_pack):
    root, _ = video_pack
    dataset = CorgiPileDataset(root, decode=VideoDecoder(frames=4, clip="random"), seed=5)
    dataset.set_epoch(1)
    # forked after this process decoded (and kept tracebacks of) earlier clips: a threaded RGB converter
    # freed in a worker used to hang it; the timeout turns such a hang into a failure
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=60)
    in_workers = {f"{s['key']}.{s['ext']}": s["data"] for s in loader}
    in_process = random_clips(root, seed=5, epoch=1)
    assert in_workers.keys() == in_process.keys()
    assert all(torch.equal(in_workers[rel], in_process[rel]) for rel in in_process)

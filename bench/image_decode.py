"""The image training loop, end to end: RandomResizedCrop(224) + flip -> uint8 batches of 64 (issue 21).

Corpora, generated here (photo-like JPEGs, quality 90, landscape and portrait in turn):
  imagenet   --n images of 500x375 (about 80 KB), the ImageNet-like set;
  hires      --n-hires images of 1600x1200 (about 600 KB);
  resized    the imagenet set packed with `corgi pack --image-max-side 256`.

Contenders, each measurement in a fresh process (`--child`), through DataLoader(num_workers=2, persistent_workers=True)
(FFCV: its Loader with 2 threads) and in one process:
  webdataset + PIL            wds.WebDataset(tars).shuffle(1000), Pillow decode + RandomResizedCrop + flip
  litdata + PIL               litdata.StreamingDataset(shuffle=True) over its own chunks, the same transform
  corgi decode="pil"          CorgiPileDataset(decode="pil", transform=the same, batching=Batches(64)): today's path
  corgi ImageDecoder          CorgiPileDataset(decode=ImageDecoder(224), batching=Batches(64)): the fused path
  corgi ImageDecoder on cuda  with --device cuda: ImageDecoder(224, device="cuda"), the workers send each batch's JPEG
                              bytes as read and `to_device(loader, "cuda")` decodes them with nvJPEG on its side stream,
                              one batch ahead; its line gives its ratio against corgi ImageDecoder (CPU workers) and
                              the best peer.  `--device cpu` checks this path without a GPU (the bytes decoded in the
                              training process by the CPU library)
The transform of the first three is Pillow's BILINEAR resize of torchvision's RandomResizedCrop box, then a
flip with probability 1/2 (bench/resized_decode.py's `RandomResizedCropFlip`: torchvision's PIL path, without
torchvision).  The peers read the original JPEGs; on the resized pack only corgi ImageDecoder runs, against
the best peer on the originals.  Each line: the median images/s of --rounds interleaved rounds (each round
one warm-up epoch, then --epochs timed epochs), and its ratio against the named baseline.

Then the physical limit: in this process, per image, the bare libjpeg-turbo decode (simplejpeg, full size)
of the same bytes against ImageDecoder's decode-crop-resize, for each JPEG decoder of its registry; with
--device, nvJPEG's bare batched decode (torchvision, full size) against the device path's batch decode.

    python bench/image_decode.py [--n 1200] [--n-hires 200] [--rounds 3] [--epochs 2] [--workers 2] [--device cuda]
                                 [--sets imagenet,hires,resized] [--modes workers,process]
                                 [--workdir bench/out/image_decode]

--sets and --modes keep a run inside a time limit (bench/gpu.sh): each measurement is a fresh process, and each
finished one is said on stderr, so a run stopped at its limit shows how far it got.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _corpus import corpus_files, make_imagenet_folder  # noqa: E402
from _timing import interleaved_medians  # noqa: E402

BATCH, CROP, WORKERS = 64, 224, 2
PEERS = ("webdataset + PIL", "litdata + PIL", 'corgi decode="pil"', "ffcv")
FUSED = "corgi ImageDecoder"
DEVICE = "corgi ImageDecoder on a device"  # its lines name the device: "corgi ImageDecoder on cuda"
GOALS = {"imagenet": 1.5, "hires": 2.5, "resized": 3.0}  # ImageDecoder / best peer, issue 21 section 2
SETS, MODES = ("imagenet", "hires", "resized"), ("workers", "process")


def comma_list(choices: tuple):
    """An argparse type: a comma-separated subset of `choices`, as a tuple in their order."""
    def parse(text: str) -> tuple:
        names = set(text.split(","))
        if not names <= set(choices):
            raise argparse.ArgumentTypeError(f"{sorted(names - set(choices))} not of {','.join(choices)}")
        return tuple(name for name in choices if name in names)

    return parse


# --- the contenders, built in the child process -----------------------------------------------------------

def pil_transform():
    from resized_decode import RandomResizedCropFlip

    return RandomResizedCropFlip(CROP, seed=0)


def pil_bytes(transform):
    import io

    from PIL import Image

    return lambda data: transform(Image.open(io.BytesIO(data)).convert("RGB"))


def webdataset_loader(root: Path, workers: int):
    import torch
    import webdataset as wds

    decode = pil_bytes(pil_transform())
    urls = sorted(str(p) for p in (root / "wds").glob("shard-*.tar"))
    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(1000).map(lambda s: decode(s["jpg"]))
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0)


def litdata_loader(root: Path, workers: int):
    from litdata import StreamingDataLoader, StreamingDataset

    decode = pil_bytes(pil_transform())

    class Images(StreamingDataset):
        def __getitem__(self, index):
            return decode(super().__getitem__(index)["data"])

    return StreamingDataLoader(Images(str(root / "litdata"), shuffle=True, seed=0), batch_size=BATCH,
                               num_workers=workers, persistent_workers=workers > 0)


def corgi_loader(root: Path, workers: int, fused: bool, pack: str = "corgi"):
    import torch

    from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder

    options = {"decode": ImageDecoder(CROP)} if fused else {"decode": "pil", "transform": pil_transform()}
    dataset = CorgiPileDataset(root / pack, batching=Batches(BATCH), seed=0, **options)
    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0)


def ffcv_loader(root: Path, workers: int):
    """FFCV's own fused JPEG path (numba, libjpeg-turbo): its RandomResizedCrop decoder and flip, uint8 (B, H, W, 3);
    `workers` are its threads (0: one thread)."""
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip

    pipelines = {"image": [RandomResizedCropRGBImageDecoder((CROP, CROP)), RandomHorizontalFlip()],
                 "label": [IntDecoder()]}
    return Loader(str(root / "ffcv.beton"), batch_size=BATCH, num_workers=max(1, workers), order=OrderOption.RANDOM,
                  pipelines=pipelines, os_cache=True, seed=0, drop_last=False)


def device_loader(root: Path, workers: int, device: str):
    """The device path: the workers send each batch's JPEG bytes as read (`ImageDecoder(device=...)`), and `to_device`
    decodes them in this process on its side stream, one batch ahead (nvJPEG on a GPU).  On a CPU device, the bench's
    check without a GPU, `to_device` passes batches through and `DecodedOnCpu` decodes the same bytes."""
    import torch

    from corgi_io.loaders import Batches, CorgiPileDataset, ImageDecoder, to_device

    on_cpu = torch.device(device).type == "cpu"
    decoder = ImageDecoder(CROP, device="cuda" if on_cpu else device)  # any device but the CPU leaves the bytes encoded
    dataset = CorgiPileDataset(root / "corgi", batching=Batches(BATCH), seed=0, decode=decoder)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    return DecodedOnCpu(loader) if on_cpu else to_device(loader, device)


class DecodedOnCpu:
    """`loader`'s batches with their images (`EncodedImages`) decoded on the CPU in this process."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for batch in self.loader:
            batch["data"] = batch["data"].decode("cpu")
            yield batch


def finisher(device: str):
    """A call that waits until the work queued on `device` is done (on a GPU, kernels run after the host moves on)."""
    import torch

    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def write_ffcv(corpus: Path, out: Path) -> str | None:
    """FFCV's .beton of the corpus (JPEGs re-encoded at quality 90, full size); None if written, else why not."""
    try:
        from ffcv.fields import IntField, RGBImageField
        from ffcv.writer import DatasetWriter
    except ImportError as exc:
        return f"ffcv: not importable ({exc}); it builds with libturbojpeg0-dev, libopencv-dev and pkg-config"
    if not out.exists():
        from PIL import Image

        files = corpus_files(corpus)
        images = type("Images", (), {"__len__": lambda self: len(files),
                                     "__getitem__": lambda self, i: (Image.open(files[i][0]).convert("RGB"), files[i][1])})
        DatasetWriter(str(out), {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()},
                      num_workers=2).from_indexed_dataset(images())
    return None


LOADERS = {"ffcv": ffcv_loader, "webdataset + PIL": webdataset_loader, "litdata + PIL": litdata_loader,
           'corgi decode="pil"': lambda root, workers: corgi_loader(root, workers, fused=False),
           FUSED: lambda root, workers: corgi_loader(root, workers, fused=True),
           f"{FUSED} (resized pack)": lambda root, workers: corgi_loader(root, workers, True, "corgi-256")}


def child(name: str, root: Path, workers: int, epochs: int, device: str) -> None:
    """One measurement: a warm-up epoch, then `epochs` timed ones, up to the device's last kernel for the device path;
    prints {"rate": images/s} as JSON."""
    loader = device_loader(root, workers, device) if name == DEVICE else LOADERS[name](root, workers)
    finish = finisher(device) if name == DEVICE else (lambda: None)

    def epoch() -> int:
        images = 0
        for batch in loader:
            images += len(batch["data"] if isinstance(batch, dict) else batch[0] if isinstance(batch, (list, tuple))
                          else batch)
        return images

    epoch()
    finish()
    start, images = time.perf_counter(), sum(epoch() for _ in range(epochs))
    finish()
    print(json.dumps({"rate": images / (time.perf_counter() - start)}))


# --- the parent: corpora, rounds, lines ------------------------------------------------------------------

def build(workdir: Path, name: str, n: int, long_side: int) -> Path:
    """`workdir/name`: the corpus and, beside it, the corgi pack, its WebDataset tars and litdata's chunks."""
    from corgi_io import PackOptions, pack

    root = workdir / name
    corpus = make_imagenet_folder(root / "corpus", n, long_side=long_side, grain=8, quality=90)
    packs = {"corgi": PackOptions(), "wds": PackOptions(shard_bytes=8 << 20)}
    if name == "imagenet":
        packs["corgi-256"] = PackOptions(image_max_side=256)
    for folder, options in packs.items():
        if not (root / folder / "manifest.json").exists():
            pack(corpus, root / folder, options, workers=2, overwrite=True, progress=False)
    if not (root / "litdata" / "index.json").exists():
        from litdata.streaming.writer import BinaryWriter

        writer = BinaryWriter(str(root / "litdata"), chunk_bytes="64MB")
        for i, (path, label) in enumerate(corpus_files(corpus)):
            writer.add_item(i, {"data": Path(path).read_bytes(), "label": label})
        writer.done()
        writer.merge()
    return root


def measure(name: str, root: Path, workers: int, epochs: int, device: str | None) -> float:
    command = [sys.executable, __file__, "--child", name, "--root", str(root), "--workers", str(workers),
               "--epochs", str(epochs), *(["--device", device] if device else [])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{name}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["rate"]


def run_rounds(sets: dict, args) -> dict:
    """{(set, contender, workers): [images/s per round]}, the contenders interleaved within each round."""
    runs, modes = {}, [workers for mode, workers in (("workers", args.workers), ("process", 0)) if mode in args.modes]
    for round_index in range(args.rounds):
        for set_name, (root, contenders) in sets.items():
            for workers in modes:
                for name in contenders:
                    rate = measure(name, root, workers, args.epochs, args.device)
                    runs.setdefault((set_name, name, workers), []).append(rate)
                    print(f"# round {round_index + 1}: {set_name} {mode_name(workers)} {name}: {rate:.0f} img/s",
                          file=sys.stderr, flush=True)
    return runs


def mode_name(workers: int) -> str:
    return f"DataLoader {workers} workers" if workers else "one process"


def peer_rates(runs: dict, set_name: str, workers: int) -> tuple:
    """({peer: median images/s} on `set_name` with `workers`, the best of them)."""
    peers = {peer: statistics.median(runs[(set_name, peer, workers)]) for peer in PEERS
             if (set_name, peer, workers) in runs}
    return peers, max(peers, key=peers.get)


def report(runs: dict, device: str | None) -> None:
    for (set_name, name, workers), rates in runs.items():
        if set_name == "resized" or name in PEERS or name == DEVICE:
            continue
        peers, best = peer_rates(runs, set_name, workers)
        for peer, rate in peers.items():
            print(f"image {set_name:8s} {mode_name(workers):22s} {peer:28s} {rate:8.0f} img/s")
        ours = statistics.median(rates)
        print(f"image {set_name:8s} {mode_name(workers):22s} {FUSED:28s} {ours:8.0f} img/s  {ours / peers[best]:.2f}x "
              f"{best} (goal >= {GOALS[set_name]}x)")
        if (set_name, DEVICE, workers) in runs:
            rate = statistics.median(runs[(set_name, DEVICE, workers)])
            print(f"image {set_name:8s} {mode_name(workers):22s} {FUSED + ' on ' + device:28s} {rate:8.0f} img/s  "
                  f"{rate / ours:.2f}x {FUSED} (CPU decode), {rate / peers[best]:.2f}x {best}")
    for (set_name, _, workers), rates in runs.items():
        if set_name == "resized":
            peers, best = peer_rates(runs, "imagenet", workers)
            ours = statistics.median(rates)
            print(f"image resized  {mode_name(workers):22s} {FUSED + ' (pack 256)':28s} {ours:8.0f} img/s  "
                  f"{ours / peers[best]:.2f}x {best} on the originals (goal >= {GOALS['resized']}x)")


def limit_lines(roots: dict, count: int = 150, rounds: int = 3) -> None:
    """Per image, in this process: the bare libjpeg-turbo decode of the same bytes (full size) against ImageDecoder's
    decode-crop-resize with each JPEG decoder of its registry (the choice by measurement), passes interleaved."""
    import numpy as np
    import simplejpeg

    from corgi_io.images.fused import JPEG_DECODERS
    from corgi_io.loaders import ImageDecoder

    out = np.empty((CROP, CROP, 3), dtype=np.uint8)
    for set_name, root in roots.items():
        jpegs = [Path(path).read_bytes() for path, _ in corpus_files(root / "corpus")[:count]]
        passes = {"bare": lambda: all(simplejpeg.decode_jpeg(data) is not None for data in jpegs)}  # each freed
        for name in JPEG_DECODERS:
            decoder = ImageDecoder(CROP, jpeg_decoder=name)
            passes[name] = lambda d=decoder: [d.decode_into(data, {"index": i}, out) for i, data in enumerate(jpegs)]
        ms = {name: seconds / len(jpegs) * 1e3 for name, seconds in interleaved_medians(passes, rounds).items()}
        print(f"limit {set_name:8s} bare libjpeg-turbo decode, full size (simplejpeg)  {ms['bare']:6.2f} ms/img")
        for name in JPEG_DECODERS:
            print(f"limit {set_name:8s} ImageDecoder(jpeg_decoder={name!r}){'':{12 - len(name)}s} {ms[name]:6.2f} "
                  f"ms/img  {ms[name] / ms['bare']:.2f}x the bare decode")


def device_limit_lines(roots: dict, device: str, rounds: int = 3) -> None:
    """Per image, in this process, one batch of the same bytes: the bare decode on `device` (a GPU: one nvJPEG batch
    through `torchvision.io.decode_jpeg`, full size; a CPU: simplejpeg) against the device path's batch decode
    (`EncodedImages.decode`: that decode, then per image a crop, a resize and a flip), each up to its last kernel."""
    import numpy as np

    from corgi_io.loaders import ImageDecoder
    from corgi_io.loaders.device_images import EncodedImages

    finish, decoder = finisher(device), ImageDecoder(CROP, device=device)
    for set_name, root in roots.items():
        jpegs = [Path(path).read_bytes() for path, _ in corpus_files(root / "corpus")[:BATCH]]
        encoded = EncodedImages(jpegs, np.arange(len(jpegs)), [str(i) for i in range(len(jpegs))], decoder)
        bare, label = bare_decode(jpegs, device)
        passes = {"bare": lambda: (bare(), finish()), "batch": lambda: (encoded.decode(device), finish())}
        for decode in passes.values():  # warm-up: nvJPEG's handles, the caching allocator
            decode()
        ms = {name: seconds / len(jpegs) * 1e3 for name, seconds in interleaved_medians(passes, rounds).items()}
        bare_name = f"bare decode of {len(jpegs)} on {device}, full size ({label})"
        batch_name = f"ImageDecoder(device={device!r}), batch of {len(jpegs)}"
        print(f"limit {set_name:8s} {bare_name:58s} {ms['bare']:6.2f} ms/img")
        print(f"limit {set_name:8s} {batch_name:58s} {ms['batch']:6.2f} ms/img  "
              f"{ms['batch'] / ms['bare']:.2f}x the bare decode")


def bare_decode(jpegs: list, device: str) -> tuple:
    """(a call that decodes `jpegs` at full size, its name): on a GPU one nvJPEG batch, on a CPU simplejpeg."""
    import torch

    if torch.device(device).type == "cpu":
        import simplejpeg

        return lambda: all(simplejpeg.decode_jpeg(data) is not None for data in jpegs), "simplejpeg"  # each freed
    import torchvision.io as tv_io

    tensors = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in jpegs]
    return lambda: tv_io.decode_jpeg(tensors, mode=tv_io.ImageReadMode.RGB, device=device), "nvJPEG, torchvision"


def check_device(device: str) -> None:
    """Stop in one line when `device` is a CUDA device that torch does not see; else say which it is, as a comment."""
    import torch

    if torch.device(device).type != "cuda":
        return
    if not torch.cuda.is_available():
        sys.exit(f"image_decode: --device {device}: torch {torch.__version__} sees no CUDA device")
    import torchvision

    print(f"# --device {device}: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1200)
    parser.add_argument("--n-hires", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "image_decode")
    parser.add_argument("--child")
    parser.add_argument("--root", type=Path)
    parser.add_argument("--workers", type=int, default=WORKERS, help="the DataLoader contenders' workers")
    parser.add_argument("--device", help="add the device path, decoding on this torch device (cuda; cpu: a check)")
    parser.add_argument("--sets", type=comma_list(SETS), default=SETS, help="of imagenet,hires,resized")
    parser.add_argument("--modes", type=comma_list(MODES), default=MODES,
                        help="of workers (a DataLoader with --workers), process (one process)")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.root, args.workers, args.epochs, args.device)
    if args.device:
        check_device(args.device)
    roots = {"imagenet": build(args.workdir, "imagenet", args.n, 500)}
    if "hires" in args.sets:
        roots["hires"] = build(args.workdir, "hires", args.n_hires, 1600)
    notes = [write_ffcv(root / "corpus", root / "ffcv.beton") for root in roots.values()]
    if notes[0]:
        print(f"# {notes[0]}")
    contenders = (*(peer for peer in PEERS if peer != "ffcv" or not notes[0]), FUSED)
    contenders += (DEVICE,) if args.device else ()
    sets = {"imagenet": (roots["imagenet"], contenders), "hires": (roots.get("hires"), contenders),
            "resized": (roots["imagenet"], (f"{FUSED} (resized pack)",))}
    runs = run_rounds({name: sets[name] for name in args.sets}, args)
    report(runs, args.device)
    measured = {name: root for name, root in roots.items() if name in args.sets}
    limit_lines(measured)
    if args.device:
        device_limit_lines(measured, args.device)
    print(f"# median of {args.rounds} interleaved rounds, each measurement a fresh process: one warm-up epoch, then "
          f"{args.epochs} timed; RandomResizedCrop({CROP}) + flip, uint8 batches of {BATCH}")


if __name__ == "__main__":
    main()

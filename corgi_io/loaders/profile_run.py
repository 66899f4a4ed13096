"""The run behind `corgi profile`: a real `CorgiPileDataset` read through a `DataLoader` for a few batches
against a simulated training step, timed stage by stage, returned as plain data.

The dataset is built from the same parts a training script gives it (`corgi_io.loaders.options`), with
``Reading(timing="trace")`` so that its `stats` keep a timeline as well as the totals.  The loop is the
training loop of the docs, ``for batch in ds.stats.watch(loader)``, with ``time.sleep(step_ms / 1000)`` in place
of the model's step: the watch times the data stall and the step, every worker times its own stages, and
`corgi_io.report.profile` renders the result (no torch there).  The DataLoader's workers are not persistent:
when the loop stops (after `batches` items, or at the end of the epoch if that comes first) they are shut
down, and each adds its last totals to the board before the board is read.
"""
from __future__ import annotations

import gc
import time
from dataclasses import replace
from time import perf_counter

import torch

from corgi_io.arguments import check_at_least, check_number
from corgi_io.errors import ArgumentError, CorgiError

from corgi_io.loaders.dataset import CorgiPileDataset
from corgi_io.loaders.image_decoder import ImageDecoder
from corgi_io.loaders.options import Reading
from corgi_io.loaders.pipeline_stats import MAX_WORKERS
from corgi_io.timing.stages import STAGES


def check_run(workers: int, batches: int, step_ms: float) -> None:
    """Refuse a run that cannot be profiled, before the pack is opened (`ArgumentError` naming the option)."""
    check_at_least("workers", workers, 0, optional=False)
    if workers > MAX_WORKERS:
        raise ArgumentError(f"workers must be at most {MAX_WORKERS} (the DataLoader workers a dataset's stats "
                            f"time per rank), got {workers}")
    check_at_least("batches", batches, 1, optional=False)
    check_number("step_ms", step_ms, 0.0)


def decoder(name: str | None, image_size: int = 224):
    """What `--decode NAME` means: None (raw bytes), "image" (an `ImageDecoder` of `image_size`, a random resized
    crop and flip, as in training), or a decoder's name for `Decoding` to check ("rgb", "text", ...)."""
    return ImageDecoder(size=image_size) if name == "image" else name


def profile_loader(source, *, workers: int = 0, batches: int = 50, step_ms: float = 0.0, epoch: int = 0,
                   reading: Reading = Reading(), **parts) -> dict:
    """Read `source` (a pack's path or URL) for `batches` items through ``DataLoader(ds, batch_size=None,
    num_workers=workers)``, sleeping `step_ms` per item, at epoch `epoch`; `parts` are the dataset's other
    keywords (shuffle, seed, ranks, batching, decode, transform, cache).

    Returns plain data: the run's figures (items, samples, wall seconds up to the last step, samples/s), the
    dataset's ``stats.snapshot()`` of the run and, per slot that ran, its intervals ``[stage, start, end]`` in
    seconds since the loop began (``"trainer"``, ``"worker 0"``, ...)."""
    check_run(workers, batches, step_ms)
    ds = CorgiPileDataset(source, reading=replace(reading, timing="trace"), **parts)
    ds.set_epoch(epoch)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=False)
    since = ds.stats.board()
    gc.collect()  # the caller's garbage is not the loader's: a full collection in the run would be a 0.1 s "stall"
    start = perf_counter()
    items, samples, wall = _loop(ds.stats.watch(loader), min(batches, len(ds)), step_ms / 1000, start)
    return {"pack": str(source), "workers": workers, "step_ms": float(step_ms), "epoch": epoch,
            "epoch_items": len(ds), "items": items, "samples": samples, "wall_seconds": wall,
            "samples_per_second": samples / wall if wall > 0 else 0.0,
            "snapshot": ds.stats.snapshot(since=since), "events": _events(ds.stats.events(), start)}


def _loop(watched, batches: int, step_seconds: float, start: float) -> tuple:
    """(items, samples, seconds from `start` to the end of the last step) of the watched loop.  It stops at the
    last item of the epoch, never asking for the end-of-epoch that would time the workers' shutdown as a
    stall; its generator is closed at once, so its clock stops and the DataLoader's workers shut down (and
    flush)."""
    items = samples = 0
    loop = iter(watched)
    try:
        for batch in loop:
            items, samples = items + 1, samples + _samples_in(batch)
            time.sleep(step_seconds)
            if items >= batches:
                break
        wall = perf_counter() - start
    except CorgiError as exc:
        raise _own_line(exc) from None
    finally:
        loop.close()
    return items, samples, wall


def _own_line(exc: CorgiError) -> CorgiError:
    """`exc` with its own one-line message: torch re-raises a DataLoader worker's error with the worker's
    traceback in the message ("Caught X in DataLoader worker process 0. Original Traceback ..."), whose last
    line is ``module.Type: message``."""
    text = str(exc).rstrip()
    if "\nOriginal Traceback" in text:
        exc.args = (text.splitlines()[-1].removeprefix(f"{type(exc).__module__}.{type(exc).__qualname__}: "),)
    return exc


def _samples_in(item) -> int:
    """The samples of one item: a batch's (its list of keys), or 1 for a sample."""
    keys = item.get("key") if isinstance(item, dict) else None
    return len(keys) if isinstance(keys, list) else 1


def _events(slots, start: float) -> dict:
    """Per slot that kept intervals, its intervals as ``[stage name, start, end]``, seconds since `start`."""
    out = {}
    for slot, events in enumerate(slots):
        if len(events):
            name = "trainer" if slot == 0 else f"worker {slot - 1}"
            out[name] = [[STAGES[int(stage)].name, float(a) - start, float(b) - start] for stage, a, b in events]
    return out

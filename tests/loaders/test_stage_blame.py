"""Issue 32 §5, the tools tell the truth: each cause of a slow input pipeline injected alone, and the stage that
`ds.stats` blames checked.

Every case reads a real CorgiPileDataset through a DataLoader inside `ds.stats.watch(...)` and reads the verdict
from `ds.stats.snapshot()` (or `corgi_io.timing.summary` of the rank paths):

* a slow store (nginx behind a latency proxy, a fast consumer): ``storage``, data-bound;
* slow decoding (2000x2000 JPEGs, decode="rgb"): ``decode``;
* a slow user transform: ``transform``;
* a slow consumer: keeps up, no data stall, the workers waiting in ``handoff``;
* one slow rank among three: that rank and ``transform``, well over the median rank (in one process, and under
  torchrun with a gloo group, where rank 0 logs the line at set_epoch).

Then that the numbers reach the training process (persistent and spawn workers), that timing="off" times nothing,
and that `watch` writes its JSON lines and TensorBoard events.  Each injected cause is 5-10x what the rest of the
pipeline costs, and the checks compare shares, not absolute times: the machine is small and shared.
"""
from __future__ import annotations

import functools
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from corgi_io import PackOptions, pack
from corgi_io.loaders import Batches, CorgiPileDataset, Ranks, Reading
from corgi_io.timing.stages import STAGES, stage_index
from corgi_io.timing.summary import busy, slowest_stage, straggler, straggler_line
from helpers.corpus_factory import make_image_corpus, write_image
from helpers.latency_proxy import LatencyProxy

ROOT = Path(__file__).resolve().parents[2]
SAMPLES, BLOCK, BATCH = 48, 4, 4  # the small pack: 12 blocks, 12 batches
WORKER_SIDE = np.array([s.side != "trainer" for s in STAGES])
TIMED = Reading(timing="stages")  # off by default: what it costs is in docs/benchmarks.md


def sleeping(seconds: float, data):
    """A user transform that takes `seconds` per sample (module level: spawn workers import it)."""
    time.sleep(seconds)
    return data


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory):
    """48 small images in blocks of 4: a pack that is cheap to read and decode."""
    root = tmp_path_factory.mktemp("blame-small")
    make_image_corpus(root / "corpus", SAMPLES, long_tail=False, seed=3)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=BLOCK), workers=1, progress=False)
    return root / "pack"


@pytest.fixture(scope="module")
def large_images(tmp_path_factory):
    """8 JPEGs of 2000x2000 (about 30 ms each to decode here), in blocks of 2; smooth (seeds of the least noise,
    `_pixels`): 210 kB each, so that reading them is cheap beside decoding them."""
    root = tmp_path_factory.mktemp("blame-large")
    for i in range(8):
        write_image(root / "corpus" / f"c{i % 2}" / f"{i:02d}.jpg", 2000, 2000, seed=24 * i)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=2), workers=1, progress=False)
    return root / "pack"


def watched(ds, step: float = 0.0, **loader_options) -> int:
    """One pass of `ds` through a DataLoader inside `ds.stats.watch`, the loop taking `step` s per batch.  A full
    garbage collection first: one of pytest's heap (0.1 s seen here) inside the pass lands in whatever stage runs."""
    gc.collect()
    timeout = 60 if loader_options.get("num_workers") else 0
    loader = torch.utils.data.DataLoader(ds, batch_size=None, timeout=timeout, **loader_options)
    batches = 0
    for _ in ds.stats.watch(loader):
        time.sleep(step)
        batches += 1
    return batches


def path_of(snapshot: dict) -> np.ndarray:
    """A snapshot's rank path as the summaries take it: seconds per stage, in board order."""
    return np.array([snapshot["path"].get(s.name, 0.0) for s in STAGES])


def share(snapshot: dict, stage: str) -> float:
    """`stage`'s share of the rank's busy time in a snapshot's path."""
    path = path_of(snapshot)
    return float(path[stage_index(stage)] / busy(path))


def test_slow_decoding_is_blamed_on_decode(large_images):
    ds = CorgiPileDataset(large_images, decode="rgb", reading=TIMED)
    assert watched(ds) == 8
    snapshot = ds.stats.snapshot()
    assert share(snapshot, "decode") > 0.8, snapshot["path"]
    assert snapshot["verdict"].startswith("data-bound") and "slowest: decode" in snapshot["verdict"]


def test_a_slow_transform_is_blamed_on_transform(small_pack):
    ds = CorgiPileDataset(small_pack, batching=Batches(BATCH), transform=functools.partial(sleeping, 0.015),
                          reading=TIMED)
    assert watched(ds) == SAMPLES // BATCH
    snapshot = ds.stats.snapshot()
    assert share(snapshot, "transform") > 0.8, snapshot["path"]
    assert snapshot["verdict"].startswith("data-bound") and "slowest: transform" in snapshot["verdict"]


@pytest.mark.parametrize("batch, step, workers, context", [
    (BATCH, 0.08, 0, None), (None, 0.02, 0, None), pytest.param(BATCH, 0.16, 2, "fork", marks=pytest.mark.slow),
    pytest.param(BATCH, 0.16, 2, "spawn", marks=pytest.mark.slow)])
def test_a_slow_consumer_keeps_up_and_its_workers_wait_in_handoff(small_pack, batch, step, workers, context):
    """The loop takes `step` s an item, the loader well under 1 ms (up to 5 ms a batch from workers on a loaded
    machine): no data stall; the workers wait on the trainer (samples too)."""
    ds = CorgiPileDataset(small_pack, batching=batch and Batches(batch), reading=TIMED)
    options = {"num_workers": workers, "multiprocessing_context": context} if workers else {}
    assert watched(ds, step=step, **options) == SAMPLES // (batch or 1)
    snapshot = ds.stats.snapshot()
    assert snapshot["verdict"].startswith("keeps up"), snapshot["verdict"]
    assert snapshot["stall_share"] <= 0.05
    path = path_of(snapshot)
    assert path[stage_index("handoff")] > 0.8 * path[WORKER_SIDE].sum(), snapshot["path"]


def rank_epoch(pack_root, rank: int, seconds: float) -> list:
    """Rank `rank` of 3 (no process group) reads its share with a transform of `seconds` per sample; its epoch's
    path as `set_epoch` records it."""
    ds = CorgiPileDataset(pack_root, ranks=Ranks(rank=rank, world_size=3), batching=Batches(BATCH), reading=TIMED,
                          transform=functools.partial(sleeping, seconds))
    ds.set_epoch(0)
    watched(ds)
    ds.set_epoch(1)  # ends epoch 0: its path, one rank's without a group
    assert len(ds.stats.last_epoch["paths"]) == 1
    return ds.stats.last_epoch["paths"][0]


def test_one_slow_rank_among_three_is_named_with_its_stage(small_pack):
    """Transforms of 60 ms a sample on rank 1, 12 ms on the others (about 0.2 s an epoch: a hiccup of the
    machine's does not make one of them a straggler)."""
    paths = np.array([rank_epoch(small_pack, rank, 0.06 if rank == 1 else 0.012) for rank in range(3)])
    found = straggler(paths)
    assert (found["rank"], found["stage"]) == (1, "transform") and found["vs_median"] > 1.5, found
    assert re.match(r"rank 1: transform \d+% of its time, \d+\.\d\dx the median rank$", straggler_line(found))
    even = np.array([rank_epoch(small_pack, rank, 0.012) for rank in range(3)])
    assert straggler(even)["vs_median"] < 1.5, straggler(even)


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_workers_bring_every_epochs_totals_and_their_start_up(small_pack, context):
    """Two epochs through the same two persistent workers: the second epoch's reads and transforms reach the
    training process too; a pass's start-up (spawning the workers included) is timed as ``startup``."""
    ds = CorgiPileDataset(small_pack, batching=Batches(BATCH), transform=functools.partial(sleeping, 0.005),
                          reading=TIMED)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True, timeout=60,
                                         multiprocessing_context=context)
    for epoch in range(2):
        ds.set_epoch(epoch)
        since = ds.stats.board()
        batches = iter(ds.stats.watch(loader))
        start = time.perf_counter()
        next(batches)
        first_wait = time.perf_counter() - start
        assert sum(1 for _ in batches) == SAMPLES // BATCH - 1
        window = ds.stats.snapshot(since)
        assert window["total"]["storage"]["samples"] == SAMPLES and window["total"]["collate"]["samples"] == SAMPLES
        assert window["total"]["transform"]["seconds"] > 0.8 * SAMPLES * 0.005
        assert {"worker 0", "worker 1"} <= set(window["slots"])
        assert window["total"]["startup"]["seconds"] > 0.8 * first_wait  # spawn: ~2 s of it is starting workers
    ds.set_epoch(2)
    assert ds.stats.last_epoch["paths"][0][stage_index("transform")] > 0  # epoch 1, as set_epoch saw it


def test_timing_off_counts_nothing(small_pack):
    ds = CorgiPileDataset(small_pack, batching=Batches(BATCH), reading=Reading(timing="off"))
    assert watched(ds) == SAMPLES // BATCH
    assert not ds.stats.board().any()
    snapshot = ds.stats.snapshot()
    assert (snapshot["path"], snapshot["total"], snapshot["stall_share"]) == ({}, {}, None)


def test_watch_writes_a_json_line_every_n_steps(small_pack, tmp_path):
    """Steps of 20 ms: a window of 5 outlasts the time a process's totals may wait before the board has them."""
    ds = CorgiPileDataset(small_pack, batching=Batches(BATCH), reading=TIMED)
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    for _ in ds.stats.watch(loader, every=5, jsonl=tmp_path / "stats.jsonl"):
        time.sleep(0.02)
    lines = [json.loads(line) for line in (tmp_path / "stats.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [5, 10]  # 12 batches: a line at steps 5 and 10
    for line in lines:
        assert set(line) == {"time", "step", "path", "stall_share", "verdict"}
        assert line["path"]["step"] > 0 and 0 <= line["stall_share"] <= 1 and isinstance(line["verdict"], str)
    assert "startup" in lines[0]["path"] and "startup" not in lines[1]["path"]  # each line is its own window


def test_watch_writes_tensorboard_scalars(small_pack, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ds = CorgiPileDataset(small_pack, batching=Batches(BATCH), reading=TIMED)
    watched_loader = ds.stats.watch(torch.utils.data.DataLoader(ds, batch_size=None), every=4,
                                    tensorboard=tmp_path / "runs")
    for _ in watched_loader:
        time.sleep(0.02)
    assert list((tmp_path / "runs").glob("events.out.tfevents.*"))
    events = EventAccumulator(str(tmp_path / "runs"))
    events.Reload()
    assert [e.step for e in events.Scalars("corgi/stall_share")] == [4, 8, 12]
    assert "corgi/storage_s" in events.Tags()["scalars"]


# --- a slow store: nginx behind a latency proxy ----------------------------------------------------------------

DELAY = 0.1  # seconds the proxy adds before each answer


@pytest.fixture(scope="module")
def served(http_server, small_pack):
    """(nginx's port, the path) of the small pack, served by nginx."""
    shutil.copytree(small_pack, http_server.root / "blame-pack", dirs_exist_ok=True)
    return http_server.port, "blame-pack"


@pytest.mark.slow
def test_a_slow_store_is_blamed_on_storage(served):
    """A fast consumer of a pack 100 ms away: data-bound, in storage, and most of it the wait for a first byte."""
    port, path = served
    with LatencyProxy(port, DELAY) as proxy:
        ds = CorgiPileDataset(f"{proxy.url}/{path}", batching=Batches(BATCH), reading=TIMED)
        windows = [read_epoch(ds, 0), read_epoch(ds, 1)]
    for window in windows:
        assert slowest_stage(path_of(window))[0] == "storage"
        assert window["verdict"].startswith("data-bound") and "slowest: storage" in window["verdict"]
        storage = window["total"]["storage"]
        assert window["total"]["first_byte"]["seconds"] > 0.5 * storage["seconds"]
        assert storage["samples"] == SAMPLES
    assert share(windows[1], "storage") > 0.8, windows[1]["path"]  # the second epoch: nothing but the pieces' reads


def read_epoch(ds, epoch: int, workers: int = 0) -> dict:
    """Epochs up to `epoch` of `ds` read (each through a new DataLoader, a fast loop): the snapshot of the last."""
    for e in range(epoch + 1):
        ds.set_epoch(e)
        since = ds.stats.board()
        assert watched(ds, num_workers=workers) == SAMPLES // BATCH
    return ds.stats.snapshot(since)


@pytest.mark.slow
@pytest.mark.parametrize("epoch, workers", [(0, 0), (1, 2)])
def test_a_slow_store_blames_no_storage_wait_on_order(served, epoch, workers):
    """A process's first pass over a remote pack also fetches the manifest's sample rows (one request here; again
    every epoch in fresh DataLoader workers): that wait is storage too.  `order` through a proxy of 300 ms may
    differ from `order` straight from nginx by its CPU's noise (a few ms), not by a request's 300 ms."""
    port, path = served
    with LatencyProxy(port, 0.3) as slow, LatencyProxy(port, 0.0) as direct:
        orders = [read_epoch(CorgiPileDataset(f"{proxy.url}/{path}", batching=Batches(BATCH),
                                              reading=Reading(threads=8, timing="stages")),
                             epoch, workers)["path"]["order"]
                  for proxy in (slow, direct)]
    assert orders[0] - orders[1] < 0.15, orders


# --- one slow rank of a real process group ----------------------------------------------------------------------

@pytest.mark.slow
def test_rank_0_names_the_slow_rank_of_a_gloo_group_at_set_epoch(small_pack, tmp_path):
    """torchrun, 3 ranks, rank 2's transform 10x the others': rank 0 logs it at set_epoch, with its stage."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
               str(ROOT / "tests" / "helpers" / "blame_ranks.py"), str(small_pack), str(tmp_path), "2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = re.findall(r"corgi-io epoch 0 straggler: (rank \d+: \S+ \d+% of its time, ([\d.]+)x the median rank)",
                        result.stderr)
    assert len(logged) == 1 and logged[0][0].startswith("rank 2: transform ") and float(logged[0][1]) > 1.5, \
        result.stderr[-3000:]
    epochs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    assert all(e["paths"] == epochs[0]["paths"] and len(e["paths"]) == 3 for e in epochs)  # the ranks agree
    assert epochs[0]["line"] == logged[0][0]

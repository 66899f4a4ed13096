"""examples/train_ddp.py under torchrun (2 ranks, CPU, gloo): killed with SIGKILL after a few checkpoints,
restarted, and every epoch trains every sample exactly once.

The run is killed whole (torchrun, both ranks and their DataLoader workers) at an arbitrary moment
after its second checkpoint.  Steps trained after the last checkpoint are lost with the kill and
trained again after the restart, so the check is: the keys logged up to the checkpoint's step, plus
the keys logged by the resumed run, make every epoch hold each sample once.
"""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
pytest.importorskip("torchdata.stateful_dataloader", reason="pip install 'corgi-io[torch]'")

import corgi_io.loaders  # noqa: E402
from corgi_io import PackOptions, open_manifest, pack  # noqa: E402
from helpers.corpus_factory import make_image_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EPOCHS, BATCH, EVERY, KILL_AFTER = 4, 4, 5, 2  # 96 images: 12 steps per epoch and rank; kill after step 10


def gloo_available() -> bool:
    import torch.distributed as dist
    return dist.is_available() and dist.is_gloo_available()


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not gloo_available(), reason="torch.distributed with gloo is needed"),
              pytest.mark.skipif(not hasattr(corgi_io.loaders, "collate_samples"),
                                 reason="the example needs the dataset's batch mode "
                                        "(CorgiPileDataset(batching=Batches(B)) yielding collated batches)")]


@pytest.fixture(scope="module")
def image_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    make_image_corpus(root / "corpus", 96, long_tail=False)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=4), workers=1, progress=False)
    return root / "pack"


@pytest.fixture(scope="module")
def readme_pack(tmp_path_factory):
    """The pack of the README's first command: `corgi pack examples/corpus ... --kind image`."""
    out = tmp_path_factory.mktemp("readme") / "corgi-example"
    pack(ROOT / "examples" / "corpus", out, PackOptions(kind="image"), workers=1, progress=False)
    return out


def launch(pack_root: Path, work: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "train_ddp.py"), str(pack_root), "--checkpoint-dir", str(work / "ckpt"),
               "--checkpoint-every", str(EVERY), "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
               "--log-keys", str(work / "keys")]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    log = open(work / "run.log", "a")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def checkpoint_step(work: Path) -> int:
    path = work / "ckpt" / "checkpoint.pt"
    return torch.load(path, weights_only=True)["step"] if path.exists() else 0


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (torchrun puts each rank in its own session)."""
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent_of[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parent_of.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def kill_everything(process: subprocess.Popen) -> None:
    """Freeze the whole tree, then SIGKILL it: a preemption that leaves no process time to clean up."""
    tree = descendants(process.pid)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    process.wait(timeout=30)


def wait_for_checkpoint(process: subprocess.Popen, work: Path, step: int, timeout: float = 120) -> None:
    deadline, seen_mtime = time.monotonic() + timeout, None
    path = work / "ckpt" / "checkpoint.pt"
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before it could be killed:\n" + (work / "run.log").read_text()
        mtime = path.stat().st_mtime_ns if path.exists() else None
        if mtime != seen_mtime:
            seen_mtime = mtime
            if checkpoint_step(work) >= step:
                return
        time.sleep(0.005)
    raise AssertionError("no checkpoint at step %d in %d s:\n%s" % (step, timeout, (work / "run.log").read_text()))


def logged(work: Path) -> list[tuple[int, int, str]]:
    rows = []
    for path in sorted((work / "keys").glob("rank*.tsv")):
        for line in path.read_text().splitlines():
            epoch, step, key = line.split("\t")
            rows.append((int(epoch), int(step), key))
    return rows


def test_a_killed_run_resumes_and_trains_every_sample_once_per_epoch(image_pack, tmp_path):
    first = launch(image_pack, tmp_path)
    wait_for_checkpoint(first, tmp_path, KILL_AFTER * EVERY)
    kill_everything(first)
    saved_step = checkpoint_step(tmp_path)
    before = logged(tmp_path)
    (tmp_path / "keys").rename(tmp_path / "keys-first")

    second = launch(image_pack, tmp_path)
    assert second.wait(timeout=300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    after = logged(tmp_path)

    assert f"resuming at step {saved_step}" in (tmp_path / "run.log").read_text()
    assert min(step for _, step, _ in after) == saved_step + 1
    kept = [row for row in before if row[1] <= saved_step]  # trained after the checkpoint: lost, trained again
    keys = sorted(open_manifest(image_pack).keys())
    trained = collections.defaultdict(list)
    for epoch, _, key in kept + after:
        trained[epoch].append(key)
    assert sorted(trained) == list(range(EPOCHS))
    for epoch in range(EPOCHS):
        assert sorted(trained[epoch]) == keys, f"epoch {epoch}: {collections.Counter(trained[epoch]).most_common(3)}"
    assert checkpoint_step(tmp_path) == EPOCHS * len(keys) // (2 * BATCH)


def test_the_example_trains_on_the_readme_pack_and_warns_of_nothing(readme_pack, tmp_path):
    """`torchrun --nproc_per_node=2 examples/train_ddp.py /tmp/corgi-example`, as the issue ran it: no
    --checkpoint-dir, and no deprecation warning from torchdata ('set_vital') or anything else on stderr."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "train_ddp.py"), str(readme_pack), "--log-keys", str(tmp_path / "keys")]
    proc = subprocess.run(command, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "set_vital" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr[-3000:]
    assert "epoch 1 done" in proc.stdout
    keys = open_manifest(readme_pack).keys()
    for epoch in range(2):  # 21 images on 2 ranks: 11 each, one of them twice
        trained = [key for e, _, key in logged(tmp_path) if e == epoch]
        assert sorted(set(trained)) == sorted(keys) and len(trained) == len(keys) + 1


def test_a_mixed_pack_is_refused_in_one_line_before_training(tmp_path_factory):
    """The example corpus packed without --kind image holds videos and texts: the script says what to do in one
    line and exits 2, instead of a traceback from each rank at the first video (torchrun still reports the
    failed ranks its own way, which names no frame of the script or of corgi_io)."""
    out = tmp_path_factory.mktemp("mixed") / "pack"
    pack(ROOT / "examples" / "corpus", out, PackOptions(), workers=1, progress=False)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "examples" / "train_ddp.py"), str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    said = [line for line in proc.stdout.splitlines() if line.startswith("train_ddp.py:")]
    assert len(said) == 1 and "--kind image" in said[0] and 'decode="auto"' in said[0], proc.stdout
    output = (proc.stdout + proc.stderr).splitlines()
    frames = [line for line in output if line.strip().startswith("File ") and ("train_ddp" in line or "corgi_io" in line)]
    assert not frames, proc.stderr[-3000:]

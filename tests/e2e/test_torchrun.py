"""A real 2-process DDP run under torchrun (CPU, gloo): no hang, equal steps, full coverage."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corgi_io.manifest import open_manifest
from corgi_io import PackOptions, pack
from helpers.corpus_factory import make_mixed_corpus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    make_mixed_corpus(root / "corpus", n_per_class=5)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=3), workers=1, progress=False)
    return root / "pack"


def torchrun(nproc: int, dataset, out, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(ROOT / "tests" / "helpers" / "ddp_train.py"), str(dataset), str(out), *map(str, extra)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.slow
def test_a_preempted_epoch_resumes_on_another_world_size_from_rank_0s_state(dataset, tmp_path):
    """2 ranks stop after 3 steps and save; 3 ranks each load old rank 0's file and finish the epoch."""
    first = torchrun(2, dataset, tmp_path / "first", "--epochs", 1, "--stop-after", 3)
    state = tmp_path / "first" / "state-rank0.json"
    assert len(state.read_bytes()) < 4096  # small JSON, whatever the pack
    resumed = torchrun(3, dataset, tmp_path / "resumed", "--epochs", 1, "--resume-from", state)
    before = [k for r in first for k in r["epochs"][0]["keys"]]
    after = [k for r in resumed for k in r["epochs"][0]["keys"]]
    assert all(r["epochs"][0]["steps"] == 3 for r in first)
    assert len({r["epochs"][0]["steps"] for r in resumed}) == 1  # equal steps: DDP did not hang
    assert set(before) | set(after) == set(open_manifest(dataset).keys())
    assert not set(before) & set(after) and len(after) - len(set(after)) < 3  # once each, up to padding


@pytest.mark.slow
@pytest.mark.parametrize("balance", ["size", "dynamic"])
def test_two_ranks_finish_with_equal_steps_and_cover_the_dataset(dataset, tmp_path, balance):
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "tests" / "helpers" / "ddp_train.py"), str(dataset), str(out), "--balance", balance, "--epochs", "2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    manifest = open_manifest(dataset)
    all_keys = set(manifest.keys())
    per_rank = -(-manifest.num_samples // 2)
    assert reports[0]["len"] == reports[1]["len"] == -(-per_rank // 4)  # batches of 4 (ddp_train's default)
    for epoch in range(2):
        steps = [r["epochs"][epoch]["steps"] for r in reports]
        assert steps[0] == steps[1] == reports[0]["len"]  # len(loader) is the steps that came out
        seen = reports[0]["epochs"][epoch]["keys"] + reports[1]["epochs"][epoch]["keys"]
        assert len(seen) == 2 * per_rank
        assert set(seen) == all_keys
    if balance == "dynamic":  # after epoch 0 both ranks agreed on the same measured cost model
        models = [r["epochs"][1]["cost_model"] for r in reports]
        assert models[0] is not None and models[0] == models[1] and len(models[0]) == 2

"""A real 2-process DDP run under torchrun (CPU, gloo): no hang, equal steps, full coverage."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corgi_io.manifest import open_manifest
from corgi_io.pack import PackOptions, pack
from corpus_factory import make_mixed_corpus

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    make_mixed_corpus(root / "corpus", n_per_class=5)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=3), workers=1, progress=False)
    return root / "pack"


@pytest.mark.slow
@pytest.mark.parametrize("balance", ["size", "dynamic"])
def test_two_ranks_finish_with_equal_steps_and_cover_the_dataset(dataset, tmp_path, balance):
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parent))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(HERE / "ddp_train.py"), str(dataset), str(out), "--balance", balance, "--epochs", "2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    manifest = open_manifest(dataset)
    all_keys = set(manifest.keys())
    assert reports[0]["len"] == reports[1]["len"] == -(-manifest.num_samples // 2)
    for epoch in range(2):
        steps = [r["epochs"][epoch]["steps"] for r in reports]
        assert steps[0] == steps[1] > 0
        seen = reports[0]["epochs"][epoch]["keys"] + reports[1]["epochs"][epoch]["keys"]
        assert len(seen) == 2 * reports[0]["len"]
        assert set(seen) == all_keys
    if balance == "dynamic":  # after epoch 0 both ranks agreed on the same measured cost model
        models = [r["epochs"][1]["cost_model"] for r in reports]
        assert models[0] is not None and models[0] == models[1] and len(models[0]) == 2

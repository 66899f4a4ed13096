"""`corgi plan`: per-rank table and JSON against an independent reading of the manifest, step simulation, errors."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from corgi_io.manifest import open_manifest
from corgi_io.report.plan import summarize
from corgi_io.schedule import block_order
from helpers.corpus_factory import make_image_corpus

N = 48  # images, packed 4 per block: 12 blocks


@pytest.fixture(scope="module")
def packed(tmp_path_factory, corgi):
    root = tmp_path_factory.mktemp("plan")
    make_image_corpus(root / "src", N, seed=3)
    result = corgi("pack", root / "src", root / "out", "--block-samples", "4", "--workers", "1")
    assert result.exit_code == 0, result.output
    return root / "out"


@pytest.fixture(scope="module")
def plan(packed, corgi):
    """``plan(W, *options)`` -> the parsed `corgi plan --json` output."""
    def run(world_size, *options):
        result = corgi("plan", packed, "--world-size", world_size, "--json", *options)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)
    return run


def epoch_sizes(packed, seed=0, epoch=0) -> np.ndarray:
    """Sizes along the epoch sequence (blocks in epoch order), from the manifest alone."""
    m = open_manifest(packed)
    order = block_order(len(m.blocks), seed, epoch)
    return np.concatenate([m.samples.size[f:f + c] for f, c in zip(m.blocks.first[order], m.blocks.count[order])])


@pytest.mark.parametrize("world_size", [1, 4, 5, 7])
def test_count_plan_matches_contiguous_slices_of_the_epoch_sequence(packed, plan, world_size):
    out = plan(world_size, "--seed", 2, "--epoch", 1)
    n = -(-N // world_size)
    seq = np.resize(epoch_sizes(packed, 2, 1), world_size * n)  # periodic: padding repeats the head
    assert out["samples_per_rank"] == n and out["padding"] == world_size * n - N and out["dropped"] == 0
    assert [r["samples"] for r in out["ranks"]] == [n] * world_size
    assert [r["size"] for r in out["ranks"]] == [int(seq[r * n:(r + 1) * n].sum()) for r in range(world_size)]
    assert out["size_total"] == int(open_manifest(packed).samples.size.sum())
    assert out["size_read"] == out["size_total"] + int(seq[:out["padding"]].sum())
    assert sum(r["share"] for r in out["ranks"]) == pytest.approx(1.0)
    sizes = np.array([r["size"] for r in out["ranks"]])
    assert out["size_imbalance"] == pytest.approx(sizes.max() / sizes.mean())


@pytest.mark.parametrize("world_size,seed", [(2, 0), (3, 1), (4, 0), (4, 5), (6, 2)])
def test_size_balance_keeps_counts_and_is_never_worse_than_count(plan, world_size, seed):
    count = plan(world_size, "--seed", seed)
    size = plan(world_size, "--seed", seed, "--balance", "size")
    assert [r["samples"] for r in size["ranks"]] == [r["samples"] for r in count["ranks"]]
    assert size["size_read"] == count["size_read"]  # the same multiset, padding included
    assert size["count_size_imbalance"] == pytest.approx(count["size_imbalance"])
    assert size["size_imbalance"] <= count["size_imbalance"] + 1e-12


def test_drop_last_and_worker_reads(plan):
    dropped = plan(5, "--drop-last")
    assert dropped["samples_per_rank"] == N // 5 and dropped["dropped"] == N % 5 and dropped["padding"] == 0
    assert dropped["size_read"] < dropped["size_total"]
    # count balance, W=3: ranks start on block boundaries (16 = 4 blocks each); 3 workers take 6, 5, 5
    # samples, cutting 2 blocks (at 6 and 11) into two reads each
    alone, split = plan(3), plan(3, "--workers", 3)
    assert [r["pieces"] for r in alone["ranks"]] == [4, 4, 4]
    assert [r["pieces"] for r in split["ranks"]] == [6, 6, 6]


def test_batch_size_adds_step_simulation(plan):
    out = plan(4, "--balance", "size", "--batch-size", 5, "--workers", 2)
    steps = out["steps"]
    assert steps["batch_size"] == 5
    # 12 samples per rank in whole batches over 2 workers: 5 + 5 on one, the remainder 2 on the other
    assert steps["num_steps"] == 3
    assert [p["plan"] for p in steps["plans"]] == ["count", "size", "size + batches"]
    assert [p["balanced_batches"] for p in steps["plans"]] == [False, False, True]
    for p in steps["plans"]:
        assert 1.0 <= p["p50"] <= p["p95"] <= p["max"] <= 4.0
        assert out["size_read"] / 4 <= p["epoch_time"] <= out["size_read"]  # sum of step maxima: >= means, <= sums
        assert p["speedup"] == pytest.approx(steps["plans"][0]["epoch_time"] / p["epoch_time"])
    assert steps["plans"][0]["speedup"] == 1.0
    assert [p["plan"] for p in plan(4, "--batch-size", 5)["steps"]["plans"]] == ["count", "count + batches"]


def test_balanced_batches_cut_step_imbalance_on_lognormal_sizes():
    """The report runs the real simulation: on a long tail, size + batches beats count per step."""
    sizes = np.random.default_rng(0).lognormal(np.log(300), 1.0, 8192).astype(np.int64) + 1
    first = np.arange(0, 8192, 64)
    out = summarize(first, np.full(len(first), 64), sizes, 4, balance="size", batch_size=16)
    count, _, batched = out["steps"]["plans"]
    assert out["size_imbalance"] < 1.01 < out["count_size_imbalance"]
    assert batched["p95"] < 1.1 < count["p95"]
    assert batched["speedup"] > 1.2


def test_text_output(packed, corgi):
    result = corgi("plan", packed, "--world-size", 3, "--balance", "size", "--batch-size", 4)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["rank", "samples"])
    assert [line.split()[0] for line in lines[header + 1:header + 4]] == ["0", "1", "2"]
    assert all(line.split()[1] == "16" for line in lines[header + 1:header + 4])
    assert any(line.startswith("size sum max/mean") for line in lines)
    assert [line.split()[0] for line in lines[-3:]] == ["count", "size", "size"]


@pytest.mark.parametrize("args,words", [
    (("--world-size", 0), "world size must be >= 1"),
    (("--world-size", 2, "--workers", -1), "workers must be >= 0"),
    (("--world-size", 2, "--batch-size", 0), "batch size must be >= 1"),
    (("--world-size", 2, "--epoch", -1), "epoch must be >= 0"),
    (("--world-size", 2, "--buffer-blocks", 0), "buffer blocks must be >= 1"),
])
def test_bad_options_give_one_line_errors(packed, corgi, args, words):
    result = corgi("plan", packed, *args)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result.stderr


def test_missing_dataset_gives_one_line_error(tmp_path, corgi):
    result = corgi("plan", tmp_path / "nothing", "--world-size", 2)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "no manifest" in result.stderr, result.stderr


@pytest.mark.slow
def test_plan_does_not_import_torch(packed):
    code = ("import sys; from corgi_io.cli import main; "
            f"main(['plan', {str(packed)!r}, '--world-size', '2', '--batch-size', '4'], standalone_mode=False); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def second_pack(tmp_path_factory, corgi):
    root = tmp_path_factory.mktemp("plan-second")
    make_image_corpus(root / "src", 12, seed=5)
    assert corgi("pack", root / "src", root / "out", "--block-samples", "4", "--workers", "1").exit_code == 0
    return root / "out"


def test_plan_of_a_blend_shows_each_source_against_the_manifests(packed, second_pack, corgi):
    result = corgi("plan", packed, second_pack, "--weights", "3,1", "--samples-per-epoch", "100", "--world-size", "4",
                   "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["sources"]
    assert [(r["samples"], r["quota"], r["per_rank"]) for r in rows] == [(N, 75, 19), (12, 25, 7)]
    assert [r["passes"] for r in rows] == [75 / N, 25 / 12] and [r["share"] for r in rows] == [0.75, 0.25]
    whole = corgi("plan", packed, second_pack, "--weights", "4,1", "--samples-per-epoch", "60", "--world-size", "1",
                  "--json")  # quotas 48 and 12: one whole pass of each, so the size shares are the packs' own
    sums = [int(np.sum(open_manifest(path).samples.size)) for path in (packed, second_pack)]
    shares = [r["size_share"] for r in json.loads(whole.stdout)["sources"]]
    assert shares == pytest.approx([sums[0] / sum(sums), sums[1] / sum(sums)])
    text = corgi("plan", packed, second_pack, "--weights", "3,1", "--world-size", "2")
    assert text.exit_code == 0 and "blend of 2 sources" in text.stdout and str(second_pack)[:23] in text.stdout


@pytest.mark.parametrize("weights, message", [("-1,1", "non-negative"), ("0,0", "not all zero"), ("1", "1 weights"),
                                              ("1,x", "not a number")])
def test_plan_of_a_blend_refuses_bad_weights_in_one_line(packed, second_pack, corgi, weights, message):
    result = corgi("plan", packed, second_pack, "--weights", weights, "--world-size", "2")
    assert result.exit_code != 0 and message in result.output

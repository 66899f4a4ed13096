"""`corgi profile PACK`: the real loader against a simulated step, its stage table, JSON, timeline PNG and errors."""
from __future__ import annotations

import json
import shutil

import pytest

from corgi_io.loaders.pipeline_stats import MAX_WORKERS
from helpers.packs import image_pack

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """24 small JPEGs and PNGs of varied sizes in blocks of 4 (6 blocks)."""
    return image_pack(tmp_path_factory, "profile", 24)


def profile_json(corgi, *args) -> dict:
    result = corgi("profile", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def loader_seconds(summary: dict) -> float:
    """The critical path's loader stages (read and worker sides): one worker's time, averaged over workers."""
    return sum(row["path_seconds"] for row in summary["stages"] if row["side"] != "trainer")


def test_the_text_has_a_row_per_stage_that_ran_and_a_verdict(corgi, images):
    result = corgi("profile", images, "--decode", "rgb", "--batches", "6", "--step-ms", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{images}: 6 batches (6 samples) in ")
    header = lines[2].split()
    assert header[:3] == ["stage", "side", "path"] and "MB/s" in header and "ms/sample" in header
    rows = {line.split()[0]: line.split() for line in lines[3:] if line and not line.startswith(("path", "per"))}
    assert {"storage", "verify", "split", "decode", "handoff", "startup", "step"} <= set(rows) - {"verdict:"}
    assert rows["storage"][1] == "read" and rows["decode"][1] == "worker" and rows["step"][1] == "trainer"
    assert float(rows["decode"][-1]) > 0  # its ms per sample
    assert "--decode-ms" in result.stdout
    assert lines[-1].startswith("verdict: keeps up") or lines[-1].startswith("verdict: data-bound by ")


def test_the_json_path_adds_up_to_the_loop_and_to_the_worker(corgi, images):
    s = profile_json(corgi, images, "--decode", "rgb", "--batches", "8", "--step-ms", "20")
    assert (s["items"], s["samples"], s["workers"]) == (8, 8, 0)
    stages = {row["stage"]: row for row in s["stages"]}
    trainer = sum(row["path_seconds"] for row in s["stages"] if row["side"] == "trainer")
    assert trainer == pytest.approx(s["wall_seconds"], rel=0.1)
    assert stages["step"]["path_seconds"] >= 8 * 0.020 and stages["step"]["share"] > 0.5
    loader = s["slots"]["trainer"]["worker"]  # no DataLoader workers: the loader runs in the training process
    assert loader["seconds"] == pytest.approx(loader["span_seconds"], rel=0.1)
    assert loader_seconds(s) == pytest.approx(loader["seconds"], rel=1e-6)
    assert sum(row["share"] for row in s["stages"] if row["side"] != "trainer") == pytest.approx(1.0)
    assert stages["storage"]["bytes"] > 0 and stages["storage"]["mb_per_s"] > 0
    assert s["decode_ms_per_sample"] == pytest.approx(stages["decode"]["ms_per_sample"])
    assert s["samples_per_second"] == pytest.approx(8 / s["wall_seconds"])
    assert s["verdict"].startswith("keeps up")  # a 20 ms step against a 64-pixel decode


def test_a_slow_step_keeps_up_and_no_step_is_data_bound(corgi, images):
    assert profile_json(corgi, images, "--batches", "8", "--step-ms", "30")["stall_share"] < 0.05
    # no step: the loop waits on every sample's read and decode (~0.3 ms) and itself takes ~0.1 ms; over a whole
    # epoch, so that one scheduling hiccup in the loop's microseconds cannot turn it (0.46 to 0.79 seen)
    fast = profile_json(corgi, images, "--batches", "24", "--decode", "rgb", "--buffer-blocks", "1")
    assert fast["stall_share"] > 0.2 and fast["verdict"].startswith("data-bound by ")


def test_a_run_longer_than_the_epoch_stops_at_its_last_batch(corgi, images):
    s = profile_json(corgi, images, "--batches", "100", "--batch-size", "5")
    stages = {row["stage"]: row for row in s["stages"]}
    assert s["items"] == s["epoch_items"] == 5 and s["samples"] == 24
    assert stages["stall"]["calls"] == 4  # the end of the epoch (the workers' shutdown) is not waited for


def test_plot_writes_a_timeline_png(corgi, images, tmp_path):
    out = tmp_path / "timeline.png"
    result = corgi("profile", images, "--batches", "4", "--plot", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith(f"wrote the timeline per worker to {out}")
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_the_timeline_shows_each_hand_over(images):
    from corgi_io.loaders.profile_run import profile_loader

    run = profile_loader(images, batches=6, step_ms=5)
    kept = sum(end - start for stage, start, end in run["events"]["trainer"] if stage == "handoff")
    counted = run["snapshot"]["slots"]["trainer"]["handoff"]["seconds"]
    assert counted >= 6 * 0.004 and kept == pytest.approx(counted, rel=0.1)


def test_timeline_rows_put_reads_beneath_their_worker():
    from corgi_io.report.profile import timeline_rows

    events = {"trainer": [["startup", 0.0, 0.5], ["step", 0.5, 0.6]],
              "worker 0": [["order", 0.1, 0.2], ["storage", 0.1, 0.15], ["storage", 0.12, 0.18], ["decode", 0.2, 0.4]]}
    rows = timeline_rows(events)
    assert [label for label, _, _ in rows] == ["trainer", "worker 0", "worker 0 reads"]
    assert rows[2][1] < rows[1][1]  # the reading threads' row is thinner
    assert rows[2][2] == {"storage": [(0.1, pytest.approx(0.05)), (0.12, pytest.approx(0.06))]}


@pytest.mark.parametrize("args, message", [
    (["--step-ms", "-1"], "step_ms must be >= 0"),
    (["--batches", "0"], "batches must be >= 1"),
    (["--workers", str(MAX_WORKERS + 1)], f"workers must be at most {MAX_WORKERS}"),
    (["--rank", "2", "--world-size", "2"], "rank=2 is outside world_size=2"),
    (["--decode", "nope"], "nope"),
    (["--balance", "size"], "balance"),
    (["--cache-limit", "lots"], "'lots' is not a size"),
    (["--cache-limit", "1MiB"], "needs its folder: give --cache-dir"),
])
def test_bad_options_fail_with_one_line(corgi, images, args, message):
    result = corgi("profile", images, *args)
    assert result.exit_code != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.output


def test_a_missing_pack_fails_with_one_line(corgi, tmp_path):
    result = corgi("profile", tmp_path / "nothing-here")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "nothing-here" in result.stderr


@pytest.mark.slow
def test_workers_each_add_up_to_their_wall_time_and_the_trainer_to_the_loop(corgi, images, tmp_path):
    s = profile_json(corgi, images, "--workers", "2", "--batch-size", "2", "--decode", "image", "--image-size",
                     "32", "--batches", "6", "--step-ms", "10", "--plot", tmp_path / "t.png")
    assert (s["items"], s["samples"]) == (6, 12)
    trainer = sum(row["path_seconds"] for row in s["stages"] if row["side"] == "trainer")
    assert trainer == pytest.approx(s["wall_seconds"], rel=0.1)  # the workers' start-up is the loop's too
    workers = [s["slots"][f"worker {w}"]["worker"] for w in range(2)]
    for worker in workers:
        assert worker["seconds"] == pytest.approx(worker["span_seconds"], rel=0.1)
    assert loader_seconds(s) == pytest.approx(sum(w["seconds"] for w in workers) / 2, rel=1e-6)
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.slow
def test_a_worker_error_is_one_line(corgi, images):
    result = corgi("profile", images, "--workers", "1", "--batch-size", "4", "--decode", "rgb")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("Error: sample ") and "DataLoader worker" not in result.stderr


@pytest.mark.slow
def test_a_remote_pack_over_http_through_the_cache(corgi, images, http_root, tmp_path):
    directory, base_url = http_root
    shutil.copytree(images, directory / "profile-pack", dirs_exist_ok=True)
    url = f"{base_url.rstrip('/')}/profile-pack"
    args = (url, "--workers", "1", "--batches", "24", "--cache-dir", tmp_path / "cache", "--cache-limit", "1MiB",
            "--storage-option", "retry_seconds=5")
    first, again = profile_json(corgi, *args), profile_json(corgi, *args)
    stages = {row["stage"]: row for row in first["stages"]}
    assert first["samples"] == 24 and stages["cache_miss"]["bytes"] > 0 and stages["cache_miss"]["mb_per_s"] > 0
    assert stages["cache_miss"]["samples"] + stages.get("cache_hit", {"samples": 0})["samples"] == 24
    assert stages["first_byte"]["calls"] > 0 and stages["first_byte"]["share"] is None  # nested in cache_miss
    assert list(first["slots"]) == ["trainer", "worker 0"]
    stages = {row["stage"]: row for row in again["stages"]}  # the cache holds the whole pack now
    assert stages["cache_hit"]["samples"] == 24 and "cache_miss" not in stages and "storage" not in stages

"""`corgi plan --simulate`: the priced run in text and JSON, worked out by hand on a small pack, and its options'
one-line errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from corgi_io.manifest import open_manifest
from helpers.corpus_factory import make_image_corpus

N = 48  # images, packed 4 per block: 12 blocks


@pytest.fixture(scope="module")
def packed(tmp_path_factory, corgi):
    root = tmp_path_factory.mktemp("simulate")
    make_image_corpus(root / "src", N, seed=5)
    result = corgi("pack", root / "src", root / "out", "--block-samples", "4", "--workers", "1")
    assert result.exit_code == 0, result.output
    return root / "out"


@pytest.fixture(scope="module")
def simulate(packed, corgi):
    """``simulate(*options)`` -> the `simulation` of `corgi plan --world-size 1 --simulate --json *options`."""
    def run(*options):
        result = corgi("plan", packed, "--world-size", 1, "--simulate", "--json", *options)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["simulation"]
    return run


def pack_bytes(packed) -> int:
    return int(open_manifest(packed).blocks.length.sum())


def test_one_rank_reads_the_pack_once_at_the_link_rate(packed, simulate):
    epoch, = simulate("--bandwidth", "1MiB/s")["epochs"]
    assert epoch["remote_bytes"] == epoch["read_bytes"] == pack_bytes(packed)
    assert epoch["wall_time"] == pytest.approx(pack_bytes(packed) / 2**20)  # no latency: the link never idles
    assert epoch["hit_rate"] is None


def test_decode_alone_is_samples_times_its_cost_on_the_slowest_worker(simulate):
    epoch, = simulate("--decode-ms", "2", "--workers", "2", "--start-ms", "30")["epochs"]
    assert epoch["wall_time"] == pytest.approx(0.030 + N / 2 * 0.002)
    assert epoch["decode_time"] == pytest.approx(N / 2 * 0.002)


def test_latency_alone_is_a_round_trip_per_wave_of_reads(simulate):
    epoch, = simulate("--latency-ms", "10", "--read-threads", "3")["epochs"]
    assert epoch["wall_time"] == pytest.approx(np.ceil(12 / 3) * 0.010)  # 12 whole blocks, 3 at a time


def test_a_cache_of_the_whole_pack_serves_the_second_epoch(packed, simulate):
    run = simulate("--cache-bytes", str(pack_bytes(packed)))
    first, second = run["epochs"]  # two epochs by default with a cache
    assert first["remote_bytes"] == pack_bytes(packed) and second["remote_bytes"] == 0
    assert second["hit_rate"] == 1.0
    assert run["model"]["cache_bytes"] == pack_bytes(packed) and run["model"]["bandwidth"] is None


def test_the_memory_bound_is_a_buffer_and_its_read_ahead(packed, simulate):
    lengths = np.sort(open_manifest(packed).blocks.length)
    memory = simulate("--buffer-blocks", "2")["memory"]
    assert lengths[-4:].sum() >= memory["worker"] >= lengths[:4].sum()  # 2 blocks of buffer, 2 read ahead
    assert memory["rank"] == memory["worker"]


def test_the_text_has_a_simulated_run_section(packed, corgi):
    result = corgi("plan", packed, "--world-size", 2, "--workers", 2, "--simulate", "--bandwidth", "10MB/s",
                   "--latency-ms", "20", "--decode-ms", "1", "--cache-bytes", "1MiB", "--epochs", "3")
    assert result.exit_code == 0, result.output
    text = result.stdout.split("simulated run: ")[1]
    assert text.startswith("10.5MB/s, 20 ms to first byte, 2 reads in flight per worker, decode 1 ms per sample, "
                           "cache 1.05MB (belady)")
    rows = [line.split() for line in text.splitlines()[2:5]]
    assert [row[0] for row in rows] == ["0", "1", "2"] and all(row[2] == "s" and row[-1].endswith("%") for row in rows)
    assert "memory bound (buffer + read-ahead)" in text.splitlines()[5]


@pytest.mark.parametrize("options,message", [
    (["--simulate", "--bandwidth", "fast"], "Invalid value for '--bandwidth': 'fast' is not a rate above 0"),
    (["--simulate", "--bandwidth", "0MB/s"], "Invalid value for '--bandwidth': '0MB/s' is not a rate above 0"),
    (["--simulate", "--cache-bytes", "half"], "Invalid value for '--cache-bytes': 'half' is not a size"),
    (["--simulate", "--latency-ms", "-1"], "Invalid value for '--latency-ms'"),
    (["--simulate", "--read-threads", "0"], "Invalid value for '--read-threads'"),
    (["--simulate", "--epochs", "0"], "Invalid value for '--epochs'"),
    (["--decode-ms", "3"], "--decode-ms prices a run: it needs --simulate"),
    (["--cache-bytes", "1GiB"], "--cache-bytes prices a run: it needs --simulate"),
])
def test_bad_simulate_options_are_one_line_errors(packed, corgi, options, message):
    result = corgi("plan", packed, "--world-size", 1, *options)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")


def test_a_blend_is_not_priced(packed, corgi):
    result = corgi("plan", packed, packed, "--world-size", 1, "--simulate")
    assert result.exit_code == 2 and "--simulate prices one DATASET, not a blend" in result.stderr

"""S3 packs against a real S3 server (moto's, on 127.0.0.1): the CLI's storage options, the dataset,
an endpoint set in the environment after a first open, and the error when the server is gone."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from corgi_io import PackOptions, open_manifest, pack
from corgi_io.errors import StorageError
from corgi_io.storage.s3 import NO_ENDPOINT_HINT
from corgi_io.storage import open_storage
from helpers.corpus_factory import make_image_corpus
from helpers.s3_server import DUMMY_CREDENTIALS, MotoServer, missing_packages

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing_packages() is not None, reason=str(missing_packages()))]
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@pytest.fixture(autouse=True)
def dummy_credentials(monkeypatch):
    """moto's dummy credentials, and no endpoint, profile or config file of the machine's."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in (*ENDPOINT_VARIABLES, "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)


@pytest.fixture(scope="module")
def local_pack(tmp_path_factory):
    """A pack of 30 small images in blocks of 4, on the local disk."""
    root = tmp_path_factory.mktemp("s3-pack")
    make_image_corpus(root / "corpus", 30, long_tail=False)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=4, shard_bytes=40_000), workers=1, progress=False)
    return root / "pack"


@pytest.fixture(scope="module")
def s3(local_pack):
    """(server, url): moto's server, with `local_pack` uploaded at url = s3://corgi-test/pack."""
    with MotoServer() as server:
        yield server, server.upload_folder(local_pack, "corgi-test", "pack")


def test_cli_stats_verify_and_plan_take_storage_options(s3, corgi, local_pack, tmp_path):
    server, url = s3
    samples = open_manifest(local_pack).num_samples
    top = ("--storage-option", f"endpoint_url={server.url}")
    nested = ("--storage-option", f"client_kwargs.endpoint_url={server.url}")
    options_file = tmp_path / "s3.json"
    options_file.write_text(json.dumps({"endpoint_url": server.url, "retry_seconds": 5}))
    for options in (top, nested, ("--storage-options", options_file)):
        stats = corgi("stats", url, "--json", *options)
        assert stats.exit_code == 0, stats.output
        assert json.loads(stats.stdout)["samples"] == samples
    verify = corgi("verify", url, *top)
    assert verify.exit_code == 0, verify.output
    assert verify.stdout.strip() == f"ok: {samples} samples intact"
    plan = corgi("plan", url, "--world-size", "2", "--json", *nested)
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["samples"] == samples


def test_dataset_yields_every_sample_once_per_epoch(s3, local_pack):
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    from corgi_io.loaders import CorgiPileDataset

    server, url = s3
    dataset = CorgiPileDataset(url, storage_options={"endpoint_url": server.url}, buffer_blocks=2, seed=0)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        keys = [sample["key"] for sample in dataset]
        assert sorted(keys) == sorted(open_manifest(local_pack).keys())
    assert dataset.storage.reads > 0


def test_dataset_through_a_cache_reads_each_piece_from_s3_once(s3, tmp_path):
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    from corgi_io.loaders import CorgiPileDataset

    server, url = s3
    options = {"storage_options": {"endpoint_url": server.url}, "buffer_blocks": 2, "seed": 0}
    plain = CorgiPileDataset(url, **options)
    cached = CorgiPileDataset(url, **options, cache_dir=tmp_path, cache_limit=10**8)
    for epoch in range(2):
        for dataset in (plain, cached):
            dataset.set_epoch(epoch)
        before = cached.storage.bytes_read
        assert [s["data"] for s in cached] == [s["data"] for s in plain]
        assert cached.storage.bytes_read - before == (0 if epoch else plain.storage.bytes_read)


ENDPOINT_CHANGED = """
import os, sys
from corgi_io.manifest import open_manifest
from corgi_io.errors import StorageError
name, dead, live, url = sys.argv[1:]
os.environ[name] = dead
try:
    open_manifest(url, {"open_retry_seconds": 0})
    sys.exit("the dead endpoint answered")
except StorageError as exc:
    assert "127.0.0.1" in str(exc), exc
os.environ[name] = live            # set after a first open of the same URL with the same options
print(open_manifest(url, {"open_retry_seconds": 0}).num_samples)
"""


@pytest.mark.parametrize("variable", ENDPOINT_VARIABLES)
def test_endpoint_from_environment_is_honoured_after_a_first_open(s3, local_pack, variable):
    from helpers.http_server import free_port

    server, url = s3
    dead = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run([sys.executable, "-c", ENDPOINT_CHANGED, variable, dead, server.url, url],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout) == open_manifest(local_pack).num_samples


def test_stopped_server_gives_retry_exhausted_errors_naming_attempts_and_seconds(local_pack, corgi):
    with MotoServer() as server:
        url = server.upload_folder(local_pack, "corgi-outage", "pack")
        options = {"endpoint_url": server.url, "retry_seconds": 0.8, "open_retry_seconds": 0.4, "backoff": 0.05}
        m = open_manifest(url, options)
        storage = open_storage(url, **options)
        shard = m.shards.path(0)
    with pytest.raises(StorageError, match=r"at offset 0: read failed after \d+ attempts in 0\.8 s: "
                                           r"EndpointConnectionError") as caught:
        storage.read_range(shard, 0, 100)
    assert int(re.search(r"after (\d+) attempts", str(caught.value)).group(1)) == storage.retried + 1 > 2
    with pytest.raises(StorageError, match=r"manifest\.json: lookup failed after \d+ attempts in 0\.4 s"):
        open_manifest(url, options)
    result = corgi("stats", url, *(f"--storage-option={k}={v}" for k, v in options.items()))
    assert result.exit_code == 1
    assert re.fullmatch(r"Error: .*lookup failed after \d+ attempts in 0\.4 s: EndpointConnectionError: [^\n]*\n",
                        result.stderr), result.stderr
    assert NO_ENDPOINT_HINT not in result.stderr  # an endpoint was given: no hint


def test_no_endpoint_names_attempts_and_says_how_to_set_one(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "corgi-nowhere-1")  # a host that no DNS resolves: nothing leaves
    with pytest.raises(StorageError, match=r"s3://corgi-test/pack/manifest\.json: lookup failed after \d+ attempts "
                                           r"in 0\.3 s: EndpointConnectionError: .*amazonaws\.com") as caught:
        open_manifest("s3://corgi-test/pack", {"open_retry_seconds": 0.3, "backoff": 0.05})
    assert str(caught.value).endswith("; " + NO_ENDPOINT_HINT)
    assert "\n" not in str(caught.value)

"""S3 packs against a real S3 server (moto's, on 127.0.0.1): the CLI's storage options and the documented
ones, the dataset (an epoch equal to the local one, resume through StatefulDataLoader, a 5 s outage, a
damaged object), an endpoint set in the environment after a first open, and the error when the server is gone."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from corgi_io import open_manifest, verify
from corgi_io.errors import CorruptDataError, StorageError
from corgi_io.storage.s3 import NO_ENDPOINT_HINT
from corgi_io.storage import open_storage
from helpers.packs import flip, small_image_pack
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
    return small_image_pack(tmp_path_factory.mktemp("s3-pack"))


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
    path_style = ("--storage-option", f"endpoint_url={server.url}", "--storage-option",
                  "config_kwargs.s3.addressing_style=path", "--storage-option", "client_kwargs.region_name=eu-west-1")
    options_file = tmp_path / "s3.json"
    options_file.write_text(json.dumps({"endpoint_url": server.url, "retry_seconds": 5}))
    for options in (top, nested, path_style, ("--storage-options", options_file)):
        stats = corgi("stats", url, "--json", *options)
        assert stats.exit_code == 0, stats.output
        assert json.loads(stats.stdout)["samples"] == samples
    verify = corgi("verify", url, *top)
    assert verify.exit_code == 0, verify.output
    assert verify.stdout.strip() == f"ok: {samples} samples intact"
    plan = corgi("plan", url, "--world-size", "2", "--json", *nested)
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["samples"] == samples


CREDENTIALS_FILE = "[corgi]\naws_access_key_id = from-profile\naws_secret_access_key = from-profile\n"
# docs/operations.md's storage options (and AWS_PROFILE), each with the environment variables it needs. moto
# takes any keys, so these show that each option is accepted and that credentials are found where it says
# (without any, a read fails: test_without_credentials_...), not that the keys are checked.
DOCUMENTED = {"keys": ({"key": "k", "secret": "s"}, {}),
              "temporary keys": ({"key": "k", "secret": "s", "token": "t"}, {}),
              "profile option": ({"profile": "corgi"}, {}),
              "AWS_PROFILE": ({}, {"AWS_PROFILE": "corgi"}),
              "region": ({"key": "k", "secret": "s", "client_kwargs": {"region_name": "eu-west-1"}}, {}),
              "path-style": ({"key": "k", "secret": "s", "config_kwargs": {"s3": {"addressing_style": "path"}}}, {})}


@pytest.fixture
def no_environment_credentials(monkeypatch, tmp_path):
    """No keys in the environment, and a credentials file whose one profile is "corgi"."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role either: nothing is found by accident
    (tmp_path / "credentials").write_text(CREDENTIALS_FILE)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))


@pytest.mark.parametrize("name", DOCUMENTED)
def test_each_documented_option_reads_and_verifies_the_pack(s3, local_pack, no_environment_credentials,
                                                              monkeypatch, name):
    server, url = s3
    options, environment = DOCUMENTED[name]
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    report = verify(url, progress=False, storage_options={**options, "endpoint_url": server.url})
    assert report.ok and report.samples_checked == open_manifest(local_pack).num_samples


def test_without_credentials_a_private_pack_fails_and_anon_reads_a_public_one(s3, local_pack,
                                                                               no_environment_credentials):
    server, url = s3
    with pytest.raises(StorageError, match=r"manifest\.json: lookup failed: NoCredentialsError"):
        open_manifest(url, {"endpoint_url": server.url})
    public = server.upload_folder(local_pack, "corgi-public", "pack", acl="public-read")
    with pytest.raises(StorageError, match=r"s3://corgi-test/pack/manifest\.json: lookup failed: PermissionError"):
        # anon=True sends unsigned requests: a private bucket refuses them
        open_manifest(url, {"endpoint_url": server.url, "anon": True})
    report = verify(public, progress=False, storage_options={"endpoint_url": server.url, "anon": True})
    assert report.ok and report.samples_checked == open_manifest(local_pack).num_samples


def dataset(source, server=None, mode: str = "corgipile", buffer_blocks: int = 1):
    """A CorgiPileDataset of the pack at `source` (given `server`, an s3:// URL read from it), blocks in a
    seeded order (shuffle `mode`), with little read-ahead: most blocks are read well after iteration starts."""
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    from corgi_io.loaders import CorgiPileDataset, Reading, Shuffle

    storage = {} if server is None else {"endpoint_url": server.url}
    return CorgiPileDataset(source, shuffle=Shuffle(mode, buffer_blocks=buffer_blocks), seed=0,
                            reading=Reading(prefetch_blocks=1, storage_options=storage))


def samples_of(ds) -> list:
    return [(sample["key"], sample["label"], sample["data"]) for sample in ds]


def test_every_sample_once_per_epoch_with_the_bytes_of_the_local_pack(s3, local_pack):
    server, url = s3
    remote, local = dataset(url, server, buffer_blocks=2), dataset(local_pack, buffer_blocks=2)
    for epoch in range(2):
        remote.set_epoch(epoch)
        local.set_epoch(epoch)
        got = samples_of(remote)
        assert got == samples_of(local)
        assert sorted(key for key, *_ in got) == sorted(open_manifest(local_pack).keys())
    assert remote.storage.reads > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_mid_epoch_resumes_to_the_rest_of_the_epoch(s3, local_pack, workers):
    """State after 3 batches of 4, loaded into a new loader: the two parts are the epoch, each sample once."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="pip install torchdata")
    server, url = s3

    def loader(ds):
        return stateful.StatefulDataLoader(ds, batch_size=4, num_workers=workers,
                                           collate_fn=lambda samples: [s["key"] for s in samples])

    first = loader(dataset(url, server, mode="window"))
    consumed = []
    for batch in first:
        consumed += batch
        if len(consumed) == 12:
            break
    second = loader(dataset(url, server, mode="window"))
    second.load_state_dict(first.state_dict())
    rest = [key for batch in second for key in batch]
    assert rest and Counter(consumed + rest) == Counter(open_manifest(local_pack).keys())


def test_an_epoch_rides_out_a_5_s_server_outage(s3, local_pack):
    """The server stops listening (and cuts its connections) for 5 s mid-epoch, from another thread: reads
    are retried within the default 20 s budget and the epoch is the local one, every sample once."""
    server, url = s3
    ds, stopped = dataset(url, server), threading.Event()

    def outage():
        with server.down():
            stopped.set()
            time.sleep(5)

    outage_thread, got, start = threading.Thread(target=outage), [], time.monotonic()
    try:
        for sample in ds:
            got.append((sample["key"], sample["label"], sample["data"]))
            if len(got) == 7:
                outage_thread.start()
                assert stopped.wait(10)
    finally:
        if outage_thread.ident is not None:
            outage_thread.join()  # the server is back for the other tests
    assert got == samples_of(dataset(local_pack))
    assert ds.storage.retried > 0 and time.monotonic() - start >= 5  # the outage was met and waited out


def test_a_damaged_object_is_a_corrupt_data_error_naming_the_shard(s3, local_pack, tmp_path):
    """One shard object overwritten with one byte of a sample flipped: the samples before it come out,
    then a CorruptDataError names that shard's URL."""
    server, _ = s3
    url = server.upload_folder(local_pack, "corgi-damaged", "pack")
    m = open_manifest(local_pack)
    victim = m.shards[-1]
    damaged = tmp_path / "shard"
    damaged.write_bytes((local_pack / victim.path).read_bytes())
    flip(damaged, int(m.samples.data_offset[victim.first_sample]))
    server.client().put_object(Bucket="corgi-damaged", Key=f"pack/{victim.path}", Body=damaged.read_bytes())
    got = []
    with pytest.raises(CorruptDataError, match=f"^{url}/{victim.path}: byte offset") as caught:
        for sample in dataset(url, server, mode="none"):
            got.append(sample["key"])
    assert caught.value.shard == victim.path and "\n" not in str(caught.value)
    assert got == m.keys()[:victim.first_sample]


def test_dataset_through_a_cache_reads_each_piece_from_s3_once(s3, tmp_path):
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    from corgi_io.loaders import Cache, CorgiPileDataset, Reading, Shuffle

    server, url = s3
    options = {"reading": Reading(storage_options={"endpoint_url": server.url}), "shuffle": Shuffle(buffer_blocks=2),
               "seed": 0}
    plain = CorgiPileDataset(url, **options)
    cached = CorgiPileDataset(url, **options, cache=Cache(tmp_path, 10**8))
    for epoch in range(2):
        for dataset in (plain, cached):
            dataset.set_epoch(epoch)
        before = cached.storage.bytes_read
        assert [s["data"] for s in cached] == [s["data"] for s in plain]
        assert cached.storage.bytes_read - before == (0 if epoch else plain.storage.bytes_read)


ENDPOINT_CHANGED = """
import os, sys
from corgi_io.manifest import open_manifest
from corgi_io.errors import CorruptDataError, StorageError
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

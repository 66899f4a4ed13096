"""`corgi pack SOURCE s3://bucket/pack` against moto's S3 server (a real server in its own process, no mocks).

The pack in the store is byte for byte the local pack of the same SOURCE (shards, columns, head) and
loads over S3; a large shard goes up as a multipart upload; a second writer is refused by the lock
object; a pack killed with SIGKILL resumes, keeping the shards it had uploaded; --dask uploads too.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corgi_io import PackOptions, open_manifest, pack
from corgi_io.errors import PackError
from helpers.corpus_factory import write_text
from helpers.processes import CLI, alive, children
from helpers.s3_server import DUMMY_CREDENTIALS, MotoServer, missing_packages

pytestmark = [pytest.mark.slow,  # starts moto's server, packs in subprocesses
              pytest.mark.skipif(missing_packages() is not None, reason=str(missing_packages()))]

FLAGS = ("--format", "wds", "--block-samples", "3", "--shard-bytes", "8k", "--order", "keep")
SLOW_MAP = '''
import os, time

def slow(fields, key):
    time.sleep(float(os.environ.get("CORGI_TEST_SLEEP", "0")))
    return fields
'''


@pytest.fixture(scope="module")
def server():
    with pytest.MonkeyPatch.context() as patch, MotoServer() as running:
        for name, value in {**DUMMY_CREDENTIALS, "AWS_CONFIG_FILE": os.devnull,
                            "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "SOURCE_DATE_EPOCH": "1700000000"}.items():
            patch.setenv(name, value)
        yield running


@pytest.fixture
def bucket(server, request):
    """A fresh bucket: its s3:// URL."""
    name = f"corgi-{request.node.name.lower().replace('_', '-')[:40].strip('-')}"
    server.client().create_bucket(Bucket=name)
    return f"s3://{name}"


def make_corpus(root: Path, n: int = 24) -> Path:
    for i in range(n):
        write_text(root / f"c{i % 3}/doc_{i:03d}.txt", 200 + 37 * i, seed=i)
    return root


def objects(server, url: str) -> dict:
    """{relpath: (bytes, ETag, LastModified)} of every object under `url`."""
    client, (bucket, _, prefix) = server.client(), url[len("s3://"):].partition("/")
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read()
            found[entry["Key"][len(prefix):].lstrip("/")] = (body, entry["ETag"], entry["LastModified"])
    return found


def local_files(folder: Path) -> dict:
    """{relpath: bytes} of a local pack, its lock file left out."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and path.name != ".corgi-lock"}


def assert_same_pack(server, url: str, local: Path) -> None:
    """The store holds exactly the local pack's files, byte for byte, and nothing else (no lock, no partial)."""
    remote = objects(server, url)
    assert sorted(remote) == sorted(local_files(local))
    assert all(remote[name][0] == data for name, data in local_files(local).items())


def test_a_pack_in_s3_is_the_local_pack_and_loads_over_s3(corgi, server, bucket, tmp_path):
    source, url = make_corpus(tmp_path / "src"), f"{bucket}/pack"
    options = ("--storage-option", f"endpoint_url={server.url}")
    assert corgi("pack", source, tmp_path / "local", *FLAGS, "--workers", 2).exit_code == 0
    result = corgi("pack", source, url, *FLAGS, "--workers", 2, *options)
    assert result.exit_code == 0, result.stderr
    assert url in result.stdout
    assert_same_pack(server, url, tmp_path / "local")
    assert len([name for name in objects(server, url) if name.startswith("shard-")]) > 3

    from corgi_io.loaders import CorgiPileDataset, Reading

    storage = {"endpoint_url": server.url}
    assert open_manifest(url, storage).num_samples == open_manifest(tmp_path / "local").num_samples == 24
    read = {s["key"]: s["data"] for s in CorgiPileDataset(url, reading=Reading(storage_options=storage))}
    want = {s["key"]: s["data"] for s in CorgiPileDataset(str(tmp_path / "local"))}
    assert read == want and len(read) == 24

    again = corgi("pack", source, url, *FLAGS, *options)  # finished: nothing is written again
    assert again.exit_code == 0, again.stderr
    assert_same_pack(server, url, tmp_path / "local")


def test_a_large_shard_goes_up_in_parts(server, bucket, tmp_path):
    source = tmp_path / "src"
    for i in range(12):
        write_text(source / f"doc_{i:02d}.txt", 1 << 20, seed=i)
    options = PackOptions(format="wds", shard_bytes=64 << 20, order="keep")
    pack(source, tmp_path / "local", options)
    pack(source, f"{bucket}/big", options, storage_options={"endpoint_url": server.url, "part_bytes": 5 << 20})
    remote = objects(server, f"{bucket}/big")
    largest = max((name for name in remote if name.startswith("shard-")), key=lambda name: len(remote[name][0]))
    size = len(remote[largest][0])
    assert size > 10 << 20
    assert remote[largest][1].strip('"').endswith(f"-{-(-size // (5 << 20))}")  # a multipart upload's ETag: -parts
    assert_same_pack(server, f"{bucket}/big", tmp_path / "local")


def test_a_lock_held_on_another_host_refuses_the_pack_in_one_line(corgi, server, bucket, tmp_path):
    url = f"{bucket}/held"
    lock = b'{"host": "node-17", "pid": 4242, "started": "2024-01-01T00:00:00Z", "run": "abc"}'
    server.client().put_object(Bucket=bucket[len("s3://"):], Key="held/.corgi-lock", Body=lock)
    result = corgi("pack", make_corpus(tmp_path / "src", 6), url, *FLAGS, "--storage-option",
                   f"endpoint_url={server.url}")
    assert result.exit_code != 0
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{url}/.corgi-lock" in result.stderr and "node-17" in result.stderr and "delete the lock" in result.stderr
    assert list(objects(server, url)) == [".corgi-lock"]  # nothing written, the other run's lock kept


def test_a_partial_object_named_out_of_the_staging_folder_is_refused_not_downloaded(corgi, server, bucket,
                                                                                   tmp_path):
    """The store is untrusted: a resumed pack downloads its partial folder into staging, so a key such as
    `.corgi-partial/../../x` must never name a local path."""
    url, escaped = f"{bucket}/escape", tmp_path / "ESCAPED"
    key = "escape/.corgi-partial/" + "../" * 12 + str(escaped).lstrip("/")
    client = server.client()
    client.put_object(Bucket=bucket[len("s3://"):], Key="escape/.corgi-partial/plan.json", Body=b"{}")
    client.put_object(Bucket=bucket[len("s3://"):], Key=key, Body=b"owned")
    result = corgi("pack", make_corpus(tmp_path / "src", 6), url, *FLAGS, "--storage-option",
                   f"endpoint_url={server.url}", "--staging", tmp_path / "staging")
    assert result.exit_code != 0 and not escaped.exists()
    assert result.stderr.count("\n") == 1 and "not a name a pack writes" in result.stderr, result.stderr


def test_a_failed_pack_releases_its_lock(server, bucket, tmp_path, write_user_module):
    write_user_module("corgi_test_failing_size", "def size(path):\n    raise SystemExit('no sizes today')\n")
    with pytest.raises(PackError, match="no sizes today"):
        pack(make_corpus(tmp_path / "src", 6), f"{bucket}/failed", PackOptions(size_fn="corgi_test_failing_size:size"),
             storage_options={"endpoint_url": server.url})
    assert ".corgi-lock" not in objects(server, f"{bucket}/failed")


def test_a_second_writer_is_refused_and_a_killed_pack_resumes(corgi, server, bucket, tmp_path, write_user_module):
    modules, source, url = write_user_module("corgi_test_slow_map", SLOW_MAP), make_corpus(tmp_path / "src"), \
        f"{bucket}/resumed"
    flags = (*FLAGS, "--map", "corgi_test_slow_map:slow", "--storage-option", f"endpoint_url={server.url}")
    assert corgi("pack", source, tmp_path / "local", *flags[:-2], "--workers", 1).exit_code == 0
    env = {**os.environ, "PYTHONPATH": f"{modules}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "CORGI_TEST_SLEEP": "0.3"}
    process = subprocess.Popen([sys.executable, "-c", CLI, "pack", str(source), url, *flags, "--workers", "1"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        records = wait_for(lambda: [n for n in objects(server, url) if n.startswith(".corgi-partial/unit-")], 2,
                           process)
        second = corgi("pack", source, url, *flags, "--workers", 1)
        assert second.exit_code != 0 and second.stderr.count("\n") == 1, second.stderr
        assert f"{url}/.corgi-lock" in second.stderr and "delete the lock" in second.stderr
        workers = children(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
        process.stderr.close()
    wait_for(lambda: not any(alive(pid) for pid in workers), 1, None)  # its pool worker dies with it
    before = objects(server, url)
    assert "manifest.json" not in before and ".corgi-lock" in before  # killed: no manifest, its lock left behind
    kept = {name: entry for name, entry in before.items() if name.startswith("shard-")}
    time.sleep(1.1)  # S3's LastModified is in seconds: a shard uploaded again would show a later one
    resumed = corgi("pack", source, url, *flags, "--workers", 1)
    assert resumed.exit_code == 0, resumed.stderr
    assert "removed the lock of a run that is gone" in resumed.stderr
    assert_same_pack(server, url, tmp_path / "local")
    after = objects(server, url)
    assert len(records) >= 2 and len(kept) >= 2
    assert all(after[name][2] == entry[2] for name, entry in kept.items())  # finished units were not redone


def test_dask_workers_upload_the_pack(server, bucket, tmp_path):
    distributed = pytest.importorskip("distributed")
    source, url = make_corpus(tmp_path / "src"), f"{bucket}/dask"
    options = PackOptions(format="wds", block_samples=3, shard_bytes=8 << 10, order="keep")
    pack(source, tmp_path / "local", options)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        pack(source, url, options, client=client, storage_options={"endpoint_url": server.url},
             staging=tmp_path / "staging")
    assert_same_pack(server, url, tmp_path / "local")
    assert not list((tmp_path / "staging").glob("shard-*"))  # uploaded, then deleted from the staging folder


def wait_for(condition, at_least, process, seconds: float = 60):
    """Poll `condition()` until its result has `at_least` items (or is true); fail if `process` ends first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if (len(found) >= at_least) if isinstance(found, list) else found:
            return found
        if process is not None and process.poll() is not None:
            pytest.fail(f"the pack ended first: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("timed out")

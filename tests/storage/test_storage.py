"""Storage: exact ranged reads (local and real HTTP via nginx), errors, retries, atomic writes."""
from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import pickle
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import aiohttp
import pytest
import urllib3

from conftest import require_nginx
from corgi_io.errors import ManifestError
from corgi_io.manifest import open_manifest
from corgi_io.storage.atomic import atomic_output, temp_name, write_atomic
from corgi_io.storage.remote import FsspecStorage
from corgi_io.storage.retry import backoff_delay
from corgi_io.storage import LocalStorage, StorageError, open_storage
from helpers.http_server import NginxServer, free_port

DATA = random.Random(0).randbytes(300_000)


def random_ranges(n: int, size: int, seed: int = 1):
    rng = random.Random(seed)
    for _ in range(n):
        offset = rng.randrange(size)
        yield offset, rng.randrange(size - offset + 1)


@pytest.fixture
def local(tmp_path):
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.tar").write_bytes(DATA)
    with LocalStorage(str(tmp_path)) as storage:
        yield storage


def test_open_storage_picks_backend(tmp_path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    assert open_storage(f"file://{tmp_path}").root == str(tmp_path)
    assert isinstance(open_storage("http://127.0.0.1:1/data/", backend="fsspec"), FsspecStorage)


@pytest.mark.slow
def test_hdfs_without_pyarrow_names_the_extra():
    """In a fresh interpreter where pyarrow cannot be imported (the dev extra installs it here).  With the JVM-free
    hdfs-native client installed, fsspec opens hdfs:// through it instead: then there is no missing extra to name."""
    pytest.importorskip("fsspec.implementations.arrow")
    if importlib.util.find_spec("hdfs_native") is not None:
        pytest.skip("hdfs-native is installed: fsspec opens hdfs:// through it, pyarrow or not")
    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "from corgi_io.storage import open_storage\n"
            "try:\n    open_storage('hdfs://namenode:8020/data/imagenet-corgi')\n"
            "except ImportError as exc:\n    print(exc)\nelse:\n    print('opened')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "corgi-io[hdfs]" in result.stdout, result.stdout + result.stderr


def test_local_read_range_exact(local):
    for offset, length in random_ranges(200, len(DATA)):
        assert local.read_range("shards/a.tar", offset, length) == DATA[offset:offset + length]
    assert local.read_all("shards/a.tar") == DATA
    assert local.size("shards/a.tar") == len(DATA)
    assert local.exists("shards/a.tar") and not local.exists("shards/b.tar")


def test_local_counts_reads_and_keeps_one_descriptor(local):
    for i in range(10):
        local.read_range("shards/a.tar", i * 1000, 500)
    local.read_range("shards/a.tar", 5, 0)  # empty: touches nothing
    assert (local.reads, local.bytes_read) == (10, 5000)
    assert len(local._fds) == 1


def test_local_short_read_names_file_and_offset(local):
    with pytest.raises(StorageError, match=r"shards/a\.tar: short read at offset 299990: "
                                           r"file ends at 300000, wanted 20 bytes"):
        local.read_range("shards/a.tar", len(DATA) - 10, 20)
    with pytest.raises(FileNotFoundError):
        local.read_range("shards/missing.tar", 0, 1)


def test_local_descriptor_cache_is_bounded(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.bin").write_bytes(bytes([i]) * 10)
    storage = LocalStorage(str(tmp_path), max_open=2)
    for i in range(5):
        assert storage.read_range(f"{i}.bin", 3, 2) == bytes([i, i])
    assert list(storage._fds) == [str(tmp_path / "3.bin"), str(tmp_path / "4.bin")]


def test_local_after_fork_and_pickle(local):
    local.read_range("shards/a.tar", 0, 10)  # parent opens its descriptor first
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must reopen, then read correct bytes
        try:
            ok = local.read_range("shards/a.tar", 1234, 5000) == DATA[1234:6234]
            os.write(w, b"1" if ok and local._pid == os.getpid() else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(r)
    assert local.read_range("shards/a.tar", 7, 3) == DATA[7:10]  # parent's fd still fine
    clone = pickle.loads(pickle.dumps(local))
    assert clone._fds == {} and clone.read_range("shards/a.tar", 9, 4) == DATA[9:13]
    clone.close()


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "manifest.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["manifest.json"]
    with atomic_output(tmp_path / "t.txt", "w") as f:
        f.write("text")
    assert (tmp_path / "t.txt").read_text() == "text"


def test_temp_name_names_host_and_pid_so_cluster_writers_never_collide():
    """Two hosts of a cluster can run the same pid: the host (made safe for a file name) tells them apart."""
    name = temp_name("shard-000.tar")
    safe_host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())
    assert name == f".shard-000.tar.tmp-{safe_host}-{os.getpid()}"
    assert "/" not in name and " " not in name
    assert temp_name("x", "7") == ".x.tmp-7"


def test_atomic_write_on_exception_leaves_old_target_and_no_temp(tmp_path):
    target = tmp_path / "shard-000.tar"
    write_atomic(target, b"complete")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as f:
            f.write(b"partial")
            assert sorted(os.listdir(tmp_path)) == sorted(["shard-000.tar", temp_name("shard-000.tar")])
            raise RuntimeError("writer crashed")
    assert target.read_bytes() == b"complete"
    assert os.listdir(tmp_path) == ["shard-000.tar"]
    with pytest.raises(RuntimeError):
        with atomic_output(tmp_path / "new.tar") as f:
            raise RuntimeError
    assert os.listdir(tmp_path) == ["shard-000.tar"]


@pytest.fixture(scope="module")
def remote(http_server):
    http_server.put("ds/shards/a.tar", DATA)
    with open_storage(http_server.url + "ds") as storage:
        yield storage


@pytest.mark.slow
def test_http_serves_ranges_with_206(http_server):
    url = http_server.put("range-check.bin", DATA)
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=10-19"})) as r:
        assert r.status == 206 and r.read() == DATA[10:20]


@pytest.mark.slow
def test_http_read_range_matches_local(remote, tmp_path):
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.tar").write_bytes(DATA)
    local = LocalStorage(str(tmp_path))
    ranges = list(random_ranges(50, len(DATA), seed=2))
    before = remote.reads
    for offset, length in ranges:
        assert remote.read_range("shards/a.tar", offset, length) == local.read_range(
            "shards/a.tar", offset, length)
    assert remote.reads - before == sum(1 for _, n in ranges if n)  # one request per range
    assert remote.read_all("shards/a.tar") == DATA
    assert remote.size("shards/a.tar") == len(DATA)
    assert remote.exists("shards/a.tar") and not remote.exists("shards/nope.tar")
    local.close()


@pytest.mark.slow
def test_http_errors_name_url_and_offset(remote):
    with pytest.raises(FileNotFoundError, match=r"ds/shards/nope\.tar"):
        remote.read_range("shards/nope.tar", 0, 10)
    with pytest.raises(StorageError, match=r"a\.tar: short read at offset 299990: got 10 of 20"):
        remote.read_range("shards/a.tar", len(DATA) - 10, 20)
    with pytest.raises(StorageError, match=r"a\.tar at offset 400000: read failed: .*416"):
        remote.read_range("shards/a.tar", 400_000, 10)
    assert remote.retried == 0  # none of these is transient


def test_server_ignoring_range_is_caught(tmp_path):
    """Python's http.server answers a Range request with 200 and the whole file."""
    (tmp_path / "a.bin").write_bytes(DATA)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        storage = FsspecStorage(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(StorageError, match=r"a\.bin: range ignored at offset 5: got 300000 of 10"):
            storage.read_range("a.bin", 5, 10)
        server.shutdown()


@pytest.mark.slow
def test_http_after_fork(remote):
    remote.read_range("shards/a.tar", 0, 10)  # parent's session and event loop exist
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if remote.read_range("shards/a.tar", 500, 1000) == DATA[500:1500] else 1)
        except BaseException:
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0
    assert remote.read_range("shards/a.tar", 20, 5) == DATA[20:25]


def test_backoff_doubles_up_to_the_cap_with_full_jitter():
    caps = [backoff_delay(n, 0.1, 2.0, rand=lambda: 1.0) for n in range(1, 9)]
    assert caps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])
    rand = random.Random(3).random
    for attempt, cap in enumerate(caps, 1):
        delays = [backoff_delay(attempt, 0.1, 2.0, rand=rand) for _ in range(400)]
        assert 0 <= min(delays) < 0.05 * cap and 0.95 * cap < max(delays) <= cap  # spread over [0, cap]
    assert backoff_delay(10_000, 0.1, 2.0) <= 2.0  # no overflow however long the outage


def test_retry_budget_defaults_and_options():
    url = f"http://127.0.0.1:{free_port()}/ds"
    default = open_storage(url)
    assert default.retry_seconds >= 10 and default.open_retry_seconds <= 5  # see docs/operations.md
    custom = open_storage(url, retry_seconds=60, open_retry_seconds=0, backoff=0.5, max_backoff=8)
    assert (custom.retry_seconds, custom.open_retry_seconds, custom.backoff, custom.max_backoff) == (60, 0, 0.5, 8)
    with pytest.raises(ValueError, match="must be >= 0"):
        open_storage(url, retry_seconds=-1)


def test_retries_for_the_time_budget_then_names_url_and_offset():
    storage = FsspecStorage(f"http://127.0.0.1:{free_port()}/ds", retry_seconds=0.6, backoff=0.05, max_backoff=0.2)
    start = time.monotonic()
    with pytest.raises(StorageError, match=r"/ds/x\.tar at offset 7: read failed after \d+ attempts in 0\.6 s: "
                                           r"ClientConnectorError: Cannot connect") as caught:
        storage.read_range("x.tar", 7, 10)
    elapsed = time.monotonic() - start
    assert 0.6 <= elapsed < 1.5
    attempts = int(re.search(r"after (\d+) attempts", str(caught.value)).group(1))
    assert attempts == storage.retried + 1 and storage.retried >= 3
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectorError)


@pytest.mark.parametrize("backend", ["fsspec", "urllib3"])
def test_a_spent_budget_counts_its_attempts_even_when_it_is_one(backend):
    storage = open_storage(f"http://127.0.0.1:{free_port()}/ds", backend=backend, retry_seconds=0)
    with pytest.raises(StorageError, match=r"/ds/x\.tar at offset 7: read failed after 1 attempt in 0\.0 s: \w*Conn"):
        storage.read_range("x.tar", 7, 10)


def test_s3_options_leave_the_retries_to_corgi_unless_botocore_retries_are_set():
    from corgi_io.storage.s3 import s3_options

    assert s3_options({"key": "k"}) == {"key": "k", "config_kwargs": {"retries": {"total_max_attempts": 1}}}
    assert s3_options({"config_kwargs": {"read_timeout": 5}})["config_kwargs"] == \
        {"read_timeout": 5, "retries": {"total_max_attempts": 1}}
    own = {"config_kwargs": {"retries": {"max_attempts": 10, "mode": "adaptive"}}}
    assert s3_options(own) == own


def test_exists_raises_when_the_server_cannot_be_asked():
    """fsspec's HTTP exists() says False for a refused connection; ours names the URL and the cause."""
    storage = FsspecStorage(f"http://127.0.0.1:{free_port()}/ds", open_retry_seconds=0.3, backoff=0.05)
    start = time.monotonic()
    with pytest.raises(StorageError, match=r"/ds/manifest\.json: lookup failed after \d+ attempts in 0\.3 s: "
                                           r"ClientConnectorError: Cannot connect to host 127\.0\.0\.1"):
        storage.exists("manifest.json")
    assert time.monotonic() - start < 1.5  # exists uses the short open budget, not retry_seconds


def test_a_server_that_never_answers_times_out_and_is_retried():
    """The client's own timeout bounds each attempt (aiohttp's default would wait 5 minutes)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel accepts connections; nothing ever answers
        storage = open_storage(f"http://127.0.0.1:{silent.getsockname()[1]}", retry_seconds=0.5, backoff=0.05,
                               client_kwargs={"timeout": aiohttp.ClientTimeout(sock_read=0.2)})
        with pytest.raises(StorageError, match=r"a\.bin: read failed after \d+ attempts in 0\.\d s: FSTimeoutError$"):
            storage.read_all("a.bin")
        assert storage.retried >= 1


def test_open_manifest_without_a_server_is_a_connection_error_not_no_manifest():
    url = f"http://127.0.0.1:{free_port()}/pack"
    start = time.monotonic()
    with pytest.raises(StorageError, match=f"{url}/manifest.json: lookup failed .*Connection refused") as caught:
        open_manifest(url)  # HttpStorage (urllib3), the default for http
    assert "no manifest" not in str(caught.value)
    assert isinstance(caught.value.__cause__, urllib3.exceptions.NewConnectionError)
    assert time.monotonic() - start < FsspecStorage(url).open_retry_seconds + 1.5  # a wrong URL fails fast


@pytest.mark.slow
def test_open_manifest_where_the_server_has_none_says_no_manifest(http_server):
    with pytest.raises(ManifestError, match=r"no-pack-here/manifest\.json: no manifest here"):
        open_manifest(http_server.url + "no-pack-here")
    storage = open_storage(http_server.url + "no-pack-here")
    assert storage.exists("manifest.json") is False and storage.retried == 0  # a 404 is an answer


class StatusServer:
    """Python's http.server answering `statuses` in turn (then 200 with `body`) to GET and HEAD."""

    def __init__(self, statuses, body=b"payload"):
        pending = list(statuses)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                status = pending.pop(0) if pending else 200
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) if status == 200 else 0))
                self.end_headers()
                if status == 200 and self.command == "GET":
                    self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_5xx_is_retried_until_it_passes():
    with StatusServer([503, 500, 502]) as server:
        storage = FsspecStorage(server.url, retry_seconds=5, backoff=0.01, max_backoff=0.05)
        assert storage.read_all("a.bin") == b"payload" and storage.retried == 3


def test_exists_raises_on_5xx_past_the_budget_and_on_403_at_once():
    with StatusServer([503] * 1000) as server:
        storage = FsspecStorage(server.url, open_retry_seconds=0.2, backoff=0.01, max_backoff=0.05)
        with pytest.raises(StorageError, match=r"manifest\.json: lookup failed after \d+ attempts .*503"):
            storage.exists("manifest.json")
        assert storage.retried >= 2
    with StatusServer([403] * 2) as server:
        storage = FsspecStorage(server.url)
        with pytest.raises(StorageError, match=r"manifest\.json: lookup failed: ClientResponseError: 403"):
            storage.exists("manifest.json")
        assert storage.retried == 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["urllib3", "fsspec"])
def test_retry_survives_server_restart(tmp_path, backend):
    """nginx goes down; the read retries and succeeds once it is back on the same port."""
    require_nginx()
    (tmp_path / "a.bin").write_bytes(DATA)
    with NginxServer(tmp_path) as server:
        storage = open_storage(server.url, backend=backend, retry_seconds=5, backoff=0.05)
        assert storage.read_range("a.bin", 0, 100) == DATA[:100]
        server.stop()
        with pytest.raises(StorageError, match=r"a\.bin at offset 0: read failed after \d+ attempts"):
            open_storage(server.url, backend=backend, retry_seconds=0.05, backoff=0.01).read_range("a.bin", 0, 1)
        restart = threading.Timer(0.5, server.start)
        restart.start()
        assert storage.read_range("a.bin", 1000, 5000) == DATA[1000:6000]
        restart.join()
        assert storage.retried >= 1

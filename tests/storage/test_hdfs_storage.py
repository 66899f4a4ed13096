"""hdfs:// packs: which client reads them (pyarrow's libhdfs or hdfs-native) and the one-line errors when
none can, without a server; and a real HDFS when CORGI_TEST_HDFS names a writable folder of one."""
from __future__ import annotations

import gc
import os
import sys
import time
import uuid

import pytest

from corgi_io.errors import ArgumentError, StorageError
from corgi_io.storage import hdfs, open_storage
from corgi_io.storage.hdfs import CLIENT_VARIABLE, SETUP_HINT, choose_client, hdfs_filesystem, installed
from helpers.packs import small_image_pack

URL = "hdfs://namenode:8020/data/pack"
BOTH = {"pyarrow", "hdfs_native"}
TEST_HDFS = "CORGI_TEST_HDFS"
TEST_HDFS_HINT = (f"set {TEST_HDFS}=hdfs://namenode:8020/tmp/corgi-test (a folder this user may write) to read a "
                  "pack from a real HDFS; pyarrow's client also needs HADOOP_HOME, JAVA_HOME and CLASSPATH")


@pytest.mark.parametrize("option,environ,present,expected", [
    (None, {}, BOTH, "hdfs-native"),                                     # no Hadoop client configured: no JVM
    (None, {"HADOOP_HOME": "/opt/hadoop"}, BOTH, "pyarrow"),
    (None, {"ARROW_LIBHDFS_DIR": "/opt/hadoop/lib/native"}, BOTH, "pyarrow"),
    (None, {"HADOOP_HOME": "/opt/hadoop"}, {"hdfs_native"}, "hdfs-native"),
    ("auto", {"HADOOP_HOME": "/opt/hadoop"}, BOTH, "pyarrow"),
    (None, {CLIENT_VARIABLE: "pyarrow"}, BOTH, "pyarrow"),
    (None, {CLIENT_VARIABLE: ""}, BOTH, "hdfs-native"),
    ("hdfs-native", {CLIENT_VARIABLE: "pyarrow", "HADOOP_HOME": "/opt/hadoop"}, BOTH, "hdfs-native"),  # option wins
])
def test_the_client_is_the_option_else_the_variable_else_the_configured_one(option, environ, present, expected):
    assert choose_client(URL, option, environ, present.__contains__) == expected


@pytest.mark.parametrize("option,environ,present,message", [
    (None, {}, {"pyarrow"}, f"{URL}: no HDFS client: {SETUP_HINT}"),
    (None, {"HADOOP_HOME": "/opt/hadoop"}, set(), f"{URL}: no HDFS client: {SETUP_HINT}"),
    ("pyarrow", {}, {"hdfs_native"},
     f"{URL}: hdfs_client='pyarrow' but pyarrow is not installed: pip install 'corgi-io[hdfs]'"),
    (None, {CLIENT_VARIABLE: "hdfs-native"}, {"pyarrow"},
     f"{URL}: {CLIENT_VARIABLE}='hdfs-native' but hdfs_native is not installed: pip install hdfs-native"),
])
def test_a_missing_client_is_one_line_naming_what_to_install(option, environ, present, message):
    with pytest.raises(StorageError) as caught:
        choose_client(URL, option, environ, present.__contains__)
    assert str(caught.value) == message and "\n" not in message


def test_an_unknown_client_is_an_argument_error_listing_the_choices():
    with pytest.raises(ArgumentError, match=r"hdfs_client must be one of \('pyarrow', 'hdfs-native', 'auto'\), "
                                            r"got 'libhdfs3'"):
        choose_client(URL, "libhdfs3", {}, BOTH.__contains__)
    with pytest.raises(ArgumentError, match=f"{CLIENT_VARIABLE} must be one of"):
        choose_client(URL, None, {CLIENT_VARIABLE: "java"}, BOTH.__contains__)


def test_a_module_blocked_in_sys_modules_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert not installed("pyarrow") and installed("os") and not installed("corgi_no_such_module")


def test_open_storage_reads_hdfs_through_the_chosen_client_not_fsspecs_registry():
    """hdfs-native's client is built without connecting, so its URL parts can be checked here."""
    native = pytest.importorskip("hdfs_native.fsspec", reason="pip install hdfs-native")
    storage = open_storage(URL, hdfs_client="hdfs-native", retry_seconds=5)
    assert type(storage._fs) is native.HdfsFileSystem
    assert (storage._fs.host, storage._fs.port, storage._root_path) == ("namenode", 8020, "/data/pack")
    assert storage.retry_seconds == 5  # corgi-io's own options are not handed to the client
    assert not hdfs.is_hdfs("webhdfs://namenode:9870/data")  # WebHDFS stays fsspec's (HTTP, no client to pick)


def test_a_forked_worker_builds_its_own_client_without_hanging():
    """A DataLoader worker forked after the dataset opened the pack replaces the parent's client, and one
    more is garbage when it forks; destroying either in the child (its tokio threads were not forked) hung."""
    native = pytest.importorskip("hdfs_native.fsspec", reason="pip install hdfs-native")
    storage = open_storage(URL, hdfs_client="hdfs-native")
    parents = id(storage._fs)
    garbage = [open_storage(URL, hdfs_client="hdfs-native")]
    garbage.append(garbage)  # a cycle: only the garbage collector frees it, in whichever process runs it
    del garbage
    pid = os.fork()
    if pid == 0:
        storage._connect()
        gc.collect()
        os._exit(0 if type(storage._fs) is native.HdfsFileSystem and id(storage._fs) != parents else 1)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done[0] == pid and done[1] == 0, "the forked child hung or failed rebuilding its client"


def test_no_client_at_all_fails_when_the_pack_is_opened(monkeypatch):
    monkeypatch.setattr(hdfs, "installed", lambda module: False)
    monkeypatch.delenv(CLIENT_VARIABLE, raising=False)
    with pytest.raises(StorageError, match=f"^{URL}: no HDFS client: pip install hdfs-native"):
        open_storage(URL)


@pytest.mark.skipif(bool(os.environ.get("HADOOP_HOME") or os.environ.get("ARROW_LIBHDFS_DIR")),
                    reason="a Hadoop client is configured here: pyarrow's would start and dial the namenode")
def test_pyarrow_without_libhdfs_is_one_line_naming_the_setup():
    pytest.importorskip("pyarrow.fs", reason="pip install 'corgi-io[hdfs]'")
    with pytest.raises(StorageError, match=f"^{URL}: the pyarrow HDFS client did not start: OSError: Unable to "
                                           r"load (libjvm|libhdfs); pip install hdfs-native") as caught:
        open_storage(URL, hdfs_client="pyarrow")
    assert "\n" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(TEST_HDFS), reason=TEST_HDFS_HINT)
@pytest.mark.parametrize("client", ["pyarrow", "hdfs-native"])
def test_a_pack_on_a_real_hdfs_reads_as_the_local_one(client, tmp_path):
    """The pack is put under a fresh folder of $CORGI_TEST_HDFS, read an epoch through `client`, then removed."""
    if client == "pyarrow" and not os.environ.get("HADOOP_HOME"):
        pytest.skip(TEST_HDFS_HINT)
    if not installed({"pyarrow": "pyarrow", "hdfs-native": "hdfs_native"}[client]):
        pytest.skip(SETUP_HINT)
    pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")
    from corgi_io.loaders import CorgiPileDataset, Reading, Shuffle

    local = small_image_pack(tmp_path)
    url = f"{os.environ[TEST_HDFS].rstrip('/')}/corgi-{uuid.uuid4().hex[:12]}"
    fs, root = hdfs_filesystem(url, {"hdfs_client": client})
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        target = f"{root}/{path.relative_to(local).as_posix()}"
        fs.makedirs(target.rpartition("/")[0], exist_ok=True)
        fs.put_file(str(path), target)
    try:
        options = {"seed": 3, "shuffle": Shuffle(buffer_blocks=2)}
        remote = CorgiPileDataset(url, reading=Reading(storage_options={"hdfs_client": client}), **options)
        got = [(s["key"], s["data"]) for s in remote]
        assert got == [(s["key"], s["data"]) for s in CorgiPileDataset(local, **options)]
        assert sorted(key for key, _ in got) == sorted(remote.manifest.keys())
    finally:
        fs.rm(root, recursive=True)

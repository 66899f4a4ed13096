"""HDFS through one of two fsspec clients, chosen by corgi-io rather than by fsspec's registry.

pyarrow's `HadoopFileSystem` calls the JNI library libhdfs: it needs a Java runtime and a Hadoop
client (HADOOP_HOME or ARROW_LIBHDFS_DIR, CLASSPATH). `hdfs-native` is a Rust client of the HDFS
protocol, with no JVM. Both register fsspec's "hdfs" protocol, and whichever fsspec loads last wins
(hdfs-native's entry point, once it is installed), so a `pip install` elsewhere would silently change
the client. corgi-io therefore picks it: the storage option `hdfs_client`, else the environment
variable CORGI_HDFS_CLIENT, else "auto" (`choose_client`). Neither pyarrow nor hdfs-native is
imported until an hdfs:// root is opened.

hdfs-native and fork: its client runs a tokio runtime whose threads a forked child (a DataLoader
worker) does not have, and destroying the client there joins them and hangs for ever. A child
therefore keeps every client it inherited (`_pin_inherited`) and builds its own on first use.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import weakref
from urllib.parse import urlsplit

from corgi_io.arguments import choose
from corgi_io.errors import StorageError, plain_message

CLIENT_VARIABLE = "CORGI_HDFS_CLIENT"
HADOOP_VARIABLES = ("HADOOP_HOME", "ARROW_LIBHDFS_DIR")  # where pyarrow finds libhdfs
# name -> (the module that says it is installed, the fsspec class, what to install)
HDFS_CLIENTS = {"pyarrow": ("pyarrow", "fsspec.implementations.arrow.HadoopFileSystem", "'corgi-io[hdfs]'"),
                "hdfs-native": ("hdfs_native", "hdfs_native.fsspec.HdfsFileSystem", "hdfs-native")}
SETUP_HINT = ("pip install hdfs-native (no JVM needed), or pip install 'corgi-io[hdfs]' and set HADOOP_HOME to a "
              "Hadoop client (libhdfs and a JVM); pick one with the storage option hdfs_client or "
              f"{CLIENT_VARIABLE}; see docs/operations.md")

_LIVE_NATIVE = weakref.WeakValueDictionary()  # id -> this process's hdfs-native filesystems (equal ones too)
_PINNED = []  # those a forked child inherited, never destroyed there


def _pin_inherited() -> None:
    """In a forked child: keep every inherited hdfs-native client alive for the child's life (see above)."""
    _PINNED.extend(_LIVE_NATIVE.values())


os.register_at_fork(after_in_child=_pin_inherited)


def is_hdfs(url: str) -> bool:
    """Whether `url` is an hdfs:// URL, the scheme whose client `hdfs_filesystem` picks."""
    return urlsplit(url).scheme == "hdfs"


def installed(module: str) -> bool:
    """Whether `module` can be imported (found, not imported; a module blocked in sys.modules is not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def choose_client(url: str, option: str | None, environ, is_installed) -> str:
    """The HDFS client for `url`, "pyarrow" or "hdfs-native", given `is_installed(module)`.

    `option` (the storage option `hdfs_client`) if given, else environ[CORGI_HDFS_CLIENT], else "auto":
    pyarrow when a Hadoop client is configured (HADOOP_HOME or ARROW_LIBHDFS_DIR is set) and pyarrow is
    installed, else hdfs-native when it is installed, else a StorageError saying how to get either.
    A named client that is not installed is a StorageError naming its package.
    """
    name, value = ("hdfs_client", option) if option is not None else (CLIENT_VARIABLE, environ.get(CLIENT_VARIABLE))
    if value in (None, "", "auto"):
        if any(environ.get(variable) for variable in HADOOP_VARIABLES) and is_installed("pyarrow"):
            return "pyarrow"
        if is_installed("hdfs_native"):
            return "hdfs-native"
        raise StorageError(f"{url}: no HDFS client: {SETUP_HINT}")
    module, _, package = choose(name, value, {**HDFS_CLIENTS, "auto": None})
    if not is_installed(module):
        raise StorageError(f"{url}: {name}={value!r} but {module} is not installed: pip install {package}")
    return value


def hdfs_filesystem(url: str, options: dict) -> tuple:
    """(fsspec filesystem, path inside it) of the hdfs:// `url` through the client `choose_client` picks.

    `options` go to that client's fsspec class, less `hdfs_client`: pyarrow's take `user`, `kerb_ticket`,
    `replication` and `extra_conf`; hdfs-native's are Hadoop configuration keys. A client that cannot
    start (pyarrow without libjvm or libhdfs, say) is a one-line StorageError. fsspec's instance cache is
    skipped, as for every FsspecStorage: each storage owns its client.
    """
    options = dict(options)
    client = choose_client(url, options.pop("hdfs_client", None), os.environ, installed)
    module, _, name = HDFS_CLIENTS[client][1].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    try:
        fs = cls(**cls._get_kwargs_from_urls(url), skip_instance_cache=True, **options)
    except OSError as e:
        raise StorageError(f"{url}: the {client} HDFS client did not start: {plain_message(e)}; {SETUP_HINT}") from e
    if client == "hdfs-native":
        _LIVE_NATIVE[id(fs)] = fs
    return fs, cls._strip_protocol(url)

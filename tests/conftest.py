"""Shared fixtures. HTTP: one real nginx per test session (see tests/http_server.py)."""
from __future__ import annotations

import importlib
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers.http_server import NginxServer, nginx_binary  # noqa: E402
from helpers.memory import MemoryRecorder  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--memory-report", metavar="FILE", help="write each test's peak and after-RSS (MiB) as JSON lines")


def pytest_configure(config):
    config.pluginmanager.register(MemoryRecorder(config.getoption("--memory-report")), "corgi-memory")


@pytest.fixture
def write_user_module(tmp_path, monkeypatch):
    """`write_user_module(name, source)` writes user code (a --size-fn, a --map function) as module `name` in
    a folder on this process's sys.path, and returns the folder (for a subprocess's PYTHONPATH).  The modules
    are forgotten afterwards, so the next test imports its own."""
    folder, written = tmp_path / "user-modules", []
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def write(name: str, source: str) -> Path:
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        written.append(name)
        return folder

    yield write
    for name in written:
        sys.modules.pop(name, None)


def require_nginx() -> None:
    """Skip without nginx; fail under CI, where a skip would hide a missing install."""
    if nginx_binary() is None:
        msg = "nginx not installed: apt-get install -y nginx-light"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def http_server(tmp_path_factory):
    """A started NginxServer serving a fresh directory; `.put(relpath, data)` returns a URL."""
    require_nginx()
    with NginxServer(tmp_path_factory.mktemp("http-root")) as server:
        yield server


@pytest.fixture(scope="session")
def http_root(http_server):
    """(directory, base_url): files written under directory are served at base_url + relpath."""
    return http_server.root, http_server.url


# --- pack / formats / manifest / verify / cli tests -------------------------------------------

@pytest.fixture(scope="session")
def corgi():
    """Run the `corgi` CLI in-process: ``corgi("pack", src, out, ...)`` -> click Result.

    The result has ``exit_code``, ``stdout`` and ``stderr`` (separate streams); unexpected
    exceptions propagate, so a traceback-worthy bug fails the test loudly.
    """
    from click.testing import CliRunner

    from corgi_io.cli import main

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    return run


@pytest.fixture(scope="session")
def mixed_corpus(tmp_path_factory):
    """(root, {relpath: Expected}): make_mixed_corpus with tricky names, built once per session."""
    from helpers.corpus_factory import make_mixed_corpus

    root = tmp_path_factory.mktemp("mixed") / "corpus"
    return root, make_mixed_corpus(root)


PACK_SMALL = ("--block-samples", "3", "--block-bytes", "24k", "--shard-bytes", "40k")


@pytest.fixture(scope="session")
def packed_mixed(mixed_corpus, tmp_path_factory, corgi):
    """fmt -> OUTPUT of `corgi pack --workers 1 PACK_SMALL` of the mixed corpus: several shards, several blocks each.

    Read-only: copy it (shutil.copytree) before damaging it.
    """
    root, _ = mixed_corpus
    cache = {}

    def get(fmt):
        if fmt not in cache:
            out = tmp_path_factory.mktemp(f"packed-{fmt}") / "pack"
            result = corgi("pack", root, out, "--format", fmt, "--workers", "1", *PACK_SMALL)
            assert result.exit_code == 0, result.output
            cache[fmt] = out
        return cache[fmt]

    return get


@pytest.fixture
def copy_pack(packed_mixed, tmp_path):
    """fmt -> a private, editable copy of `packed_mixed(fmt)` at tmp_path/pack (to damage or edit)."""
    def copy(fmt):
        dest = tmp_path / "pack"
        shutil.copytree(packed_mixed(fmt), dest)
        return dest
    return copy

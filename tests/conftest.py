"""Shared fixtures. HTTP: one real nginx per test session (see tests/http_server.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from http_server import NginxServer, nginx_binary  # noqa: E402


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

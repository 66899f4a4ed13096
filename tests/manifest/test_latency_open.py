"""Opening a remote pack costs as few round trips as it can (issue 31 §2): over HTTP the head is one GET, no HEAD,
counted in nginx's access log; what it refuses it still refuses in one line."""
from __future__ import annotations

import shutil

import pytest

from corgi_io import ManifestError
from corgi_io.manifest import HEAD_NAME, open_manifest
from corgi_io.manifest import reader
from helpers.packs import small_image_pack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory, http_server):
    """(URL, nginx path prefix) of a small image pack under nginx's root."""
    pack = small_image_pack(tmp_path_factory.mktemp("latency-open"))
    shutil.copytree(pack, http_server.root / "latency-open")
    return http_server.url + "latency-open", "/latency-open/"


def requests_under(http_server, since: int, prefix: str) -> list:
    """The requests nginx logged for paths under `prefix` after its first `since` (the server is shared: another
    test's lingering reader may still be asking for its own files)."""
    return [r for r in http_server.requests()[since:] if r[1].startswith(prefix)]


def test_opening_a_remote_pack_is_one_get_for_the_head_and_one_for_the_block_table(served, http_server):
    url, prefix = served
    since = len(http_server.requests())
    m = open_manifest(url)
    logged = [(method, path) for method, path, _, _ in http_server.requests()[since:] if path.startswith(prefix)]
    assert logged == [("GET", f"{prefix}{HEAD_NAME}"), ("GET", f"{prefix}columns/blocks.bin")]
    assert m.num_samples == 30


def test_an_oversized_head_is_refused_in_one_line_without_reading_its_body(http_server, monkeypatch):
    monkeypatch.setattr(reader, "MAX_HEAD_BYTES", 1000)
    http_server.put("latency-huge/manifest.json", b" " * 1001)
    since = len(http_server.requests())
    with pytest.raises(ManifestError, match=r"latency-huge/manifest\.json: 1001 bytes, more than the 1000 it may hold$"):
        open_manifest(http_server.url + "latency-huge")
    assert len(requests_under(http_server, since, "/latency-huge/")) == 1


def test_a_missing_head_says_no_manifest_here_after_one_request(http_server):
    since = len(http_server.requests())
    with pytest.raises(ManifestError, match=r"latency-nothing/manifest\.json: no manifest here"):
        open_manifest(http_server.url + "latency-nothing")
    assert len(requests_under(http_server, since, "/latency-nothing/")) == 1


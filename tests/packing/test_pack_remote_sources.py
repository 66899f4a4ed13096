"""`corgi pack` reads existing shards over fsspec: a tar served by nginx over HTTP, a folder of tars in S3 (moto's
server, its endpoint from the environment), and packs them as it packs the same tars on the local disk."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from corgi_io.manifest import open_manifest
from helpers.s3_server import DUMMY_CREDENTIALS, MotoServer, missing_packages
from helpers.source_shards import pack_args, stock_samples, write_tars

pytestmark = pytest.mark.slow  # starts servers


def test_a_tar_over_http_packs_like_the_local_tar(http_server, corgi, tmp_path):
    source = write_tars(tmp_path / "tars", tars=1)
    url = http_server.put("sources/part-000.tar", (tmp_path / "tars" / "part-000.tar").read_bytes())
    result = corgi(*pack_args(url, tmp_path / "out", "--workers", 1))
    assert result.exit_code == 0, result.stderr
    assert set(stock_samples(tmp_path / "out")) == set(source)
    assert open_manifest(tmp_path / "out").options["source"] == url


@pytest.mark.skipif(missing_packages() is not None, reason=str(missing_packages()))
def test_a_folder_of_tars_in_s3_packs_like_the_local_folder(corgi, tmp_path, monkeypatch):
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    write_tars(tmp_path / "tars", tars=3)
    assert corgi(*pack_args(tmp_path / "tars", tmp_path / "local", "--workers", 1)).exit_code == 0
    with MotoServer() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
        url = server.upload_folder(tmp_path / "tars", "corgi-sources", "tars")
        result = corgi(*pack_args(url, tmp_path / "remote", "--workers", 2))
    assert result.exit_code == 0, result.stderr
    local, remote = Path(tmp_path / "local"), Path(tmp_path / "remote")
    assert sorted(path.name for path in remote.glob("shard-*")) == sorted(path.name for path in local.glob("shard-*"))
    assert all((remote / path.name).read_bytes() == path.read_bytes() for path in local.glob("shard-*"))
    assert stock_samples(remote) == stock_samples(local)

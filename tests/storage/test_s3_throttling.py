"""S3 under throttling and refusal (issue 31, item 3): botocore's 503 SlowDown, as s3fs hands it over, is
transient and its Retry-After is read; a 403 from a real S3 server (moto's) is a one-line StorageError naming
s3://bucket/key, not a bare PermissionError."""
from __future__ import annotations

import os

import pytest

from corgi_io import open_manifest
from corgi_io.errors import StorageError
from corgi_io.storage import open_storage
from helpers.s3_server import DUMMY_CREDENTIALS, MotoServer, missing_packages

pytestmark = pytest.mark.skipif(missing_packages() is not None, reason=str(missing_packages()))


@pytest.fixture(autouse=True)
def dummy_credentials(monkeypatch):
    """moto's dummy credentials, and no endpoint, profile or config file of the machine's."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)


def slow_down(retry_after: str | None = None) -> OSError:
    """The error s3fs raises for S3's `503 SlowDown` (botocore's ClientError, translated), with its cause."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    headers = {} if retry_after is None else {"retry-after": retry_after}
    response = {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
                "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": headers}}
    return translate_boto_error(ClientError(response, "GetObject"))


def test_s3_slow_down_is_retried_after_the_wait_it_asks_for():
    from corgi_io.storage.remote import classify_error
    from corgi_io.storage.retry import TRANSIENT

    storage = open_storage("s3://corgi-test/pack", endpoint_url="http://127.0.0.1:1")
    assert classify_error(slow_down()) == TRANSIENT
    assert storage.retry_after(slow_down("2")) == 2.0 and storage.retry_after(slow_down()) is None


@pytest.mark.slow
def test_a_403_names_the_s3_url_in_one_line(tmp_path):
    """Unsigned requests (anon=True) to a private bucket are refused: lookup and read name s3://bucket/key."""
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "shard.tar").write_bytes(b"x" * 100)
    with MotoServer() as server:
        url = server.upload_folder(tmp_path, "corgi-private", "pack")
        options = {"endpoint_url": server.url, "anon": True}
        with pytest.raises(StorageError, match=r"^s3://corgi-private/pack/manifest\.json: lookup failed: "
                                               r"PermissionError: [^\n]+$"):
            open_manifest(url, options)
        storage = open_storage(url, **options)
        with pytest.raises(StorageError, match=r"^s3://corgi-private/pack/shard\.tar at offset 10: read failed: "
                                               r"PermissionError: [^\n]+$"):
            storage.read_range("shard.tar", 10, 20)
    assert storage.retried == 0

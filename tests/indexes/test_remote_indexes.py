"""Index files for a pack in S3 (moto's server in a process of its own): `corgi pack SOURCE s3://... --index` and
`corgi index s3://...` put the same files beside the pack as a local pack gets, each uploaded whole; a pack behind
HTTP, where nothing can be written, is one line."""
from __future__ import annotations

import os

import pytest
from helpers.index_packs import captioned_source
from helpers.s3_server import DUMMY_CREDENTIALS, MotoServer, missing_packages

pytestmark = [pytest.mark.slow,  # starts moto's server
              pytest.mark.skipif(missing_packages() is not None, reason=str(missing_packages()))]

FLAGS = ("--workers", "1", "--block-samples", "3", "--shard-bytes", "12k", "--order", "keep")


@pytest.fixture(scope="module")
def server():
    with pytest.MonkeyPatch.context() as patch, MotoServer() as running:
        for name, value in {**DUMMY_CREDENTIALS, "AWS_CONFIG_FILE": os.devnull,
                            "AWS_SHARED_CREDENTIALS_FILE": os.devnull}.items():
            patch.setenv(name, value)
        yield running


def index_objects(server, bucket: str) -> dict:
    """{key: bytes} of the index objects (.idx, shardindex.json) in `bucket`."""
    client = server.client()
    keys = [entry["Key"] for entry in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {key.split("/", 1)[1]: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys
            if key.endswith((".idx", "shardindex.json"))}


def test_an_s3_pack_gets_the_index_files_of_the_same_local_pack(server, tmp_path, corgi):
    source = tmp_path / "src"
    captioned_source(source)
    server.client().create_bucket(Bucket="indexes")
    options = ("--storage-option", f"endpoint_url={server.url}")
    local = corgi("pack", source, tmp_path / "pack", *FLAGS, "--index", "wids,dali")
    assert local.exit_code == 0, local.stderr
    want = {path.name: path.read_bytes() for path in (tmp_path / "pack").iterdir()
            if path.suffix == ".idx" or path.name == "shardindex.json"}
    packed = corgi("pack", source, "s3://indexes/pack", *FLAGS, *options, "--index", "wids,dali")
    assert packed.exit_code == 0, packed.stderr
    assert index_objects(server, "indexes") == want and len(want) > 3
    assert "corgi pack: warning: 1 of " in packed.stderr  # the key with a space, in DALI's index
    server.client().delete_object(Bucket="indexes", Key="pack/shardindex.json")
    again = corgi("index", "s3://indexes/pack", "--for", "wids", *options)
    assert again.exit_code == 0, again.stderr
    assert index_objects(server, "indexes") == want


def test_a_pack_behind_http_is_one_line(http_root, tmp_path, corgi):
    folder, base_url = http_root
    captioned_source(tmp_path / "src")
    assert corgi("pack", tmp_path / "src", folder / "index-http", *FLAGS).exit_code == 0
    result = corgi("index", f"{base_url}/index-http", "--for", "wids")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "index files are written beside a pack in a local folder or in S3" in result.stderr


def test_a_users_dataset_yaml_in_s3_is_kept_and_an_overwrite_removes_the_old_index_files(server, tmp_path, corgi):
    source = tmp_path / "src"
    captioned_source(source)
    client, options = server.client(), ("--storage-option", f"endpoint_url={server.url}")
    client.create_bucket(Bucket="energon")
    packed = corgi("pack", source, "s3://energon/pack", *FLAGS, *options)
    assert packed.exit_code == 0, packed.stderr
    mine = b"__module__: megatron.energon\n__class__: CaptioningWebdataset\nfield_map: {image: jpg, caption: txt}\n"
    client.put_object(Bucket="energon", Key="pack/.nv-meta/dataset.yaml", Body=mine)
    indexed = corgi("index", "s3://energon/pack", "--for", "energon,wids", *options)
    assert indexed.exit_code == 0, indexed.stderr
    assert client.get_object(Bucket="energon", Key="pack/.nv-meta/dataset.yaml")["Body"].read() == mine
    assert client.get_object(Bucket="energon", Key="pack/.nv-meta/.info.json")["ContentLength"] > 0
    again = corgi("pack", source, "s3://energon/pack", *FLAGS, *options, "--overwrite")
    assert again.exit_code == 0, again.stderr
    keys = [entry["Key"] for entry in client.list_objects_v2(Bucket="energon").get("Contents", [])]
    assert [key for key in keys if key.startswith(("pack/.nv-meta/", "pack/shardindex.json"))] == []
    assert [key for key in keys if key.endswith(".idx")] == []

"""`--storage-option KEY=VALUE` / `--storage-options FILE.json`: how values parse, how dotted keys nest,
and the one-line usage errors (the commands that take them run against S3 in test_s3_storage.py)."""
from __future__ import annotations

import json

import click
import pytest

from corgi_io.cli.storage_options import parse_storage_options


def test_values_parse_as_json_when_they_can_else_as_strings():
    pairs = ["endpoint_url=http://127.0.0.1:9000", "retry_seconds=60", "anon=true", "token=null",
             'headers={"Authorization": "Bearer x"}', 'key="123"', "secret=a=b", "empty="]
    assert parse_storage_options(pairs) == {
        "endpoint_url": "http://127.0.0.1:9000", "retry_seconds": 60, "anon": True, "token": None,
        "headers": {"Authorization": "Bearer x"}, "key": "123", "secret": "a=b", "empty": ""}


def test_dotted_keys_nest_and_apply_on_top_of_the_file(tmp_path):
    path = tmp_path / "s3.json"
    path.write_text(json.dumps({"key": "k", "client_kwargs": {"region_name": "eu-west-1"}}))
    options = parse_storage_options(["client_kwargs.endpoint_url=http://minio:9000",
                                     "config_kwargs.retries.total_max_attempts=3", "key=other"], path)
    assert options == {"key": "other",
                       "client_kwargs": {"region_name": "eu-west-1", "endpoint_url": "http://minio:9000"},
                       "config_kwargs": {"retries": {"total_max_attempts": 3}}}


@pytest.mark.parametrize("pair, words", [("endpoint_url", "is not KEY=VALUE"), ("=1", "is not KEY=VALUE"),
                                         ("a..b=1", "is not KEY=VALUE"), ("a.=1", "is not KEY=VALUE")])
def test_malformed_pairs_are_usage_errors(pair, words):
    with pytest.raises(click.BadParameter, match=words):
        parse_storage_options([pair])


def test_a_value_cannot_also_hold_options():
    with pytest.raises(click.BadParameter, match="'a.b=2': a is already set to a value"):
        parse_storage_options(["a=1", "a.b=2"])


@pytest.mark.parametrize("text, words", [("[1]", "a JSON object of options is needed, not list"),
                                         ("{not json", "not JSON")])
def test_a_bad_options_file_is_a_usage_error(tmp_path, text, words):
    path = tmp_path / "options.json"
    path.write_text(text)
    with pytest.raises(click.BadParameter, match=words):
        parse_storage_options([], path)


@pytest.mark.parametrize("command", ["stats", "verify", "plan"])
def test_commands_that_read_a_pack_take_storage_options(corgi, command, tmp_path):
    for flag in ("--storage-option KEY=VALUE", "--storage-options FILE.json"):
        assert flag in corgi(command, "--help").stdout
    plan_args = ["--world-size", "2"] if command == "plan" else []
    result = corgi(command, tmp_path, "--storage-option", "retry_seconds", *plan_args)
    assert result.exit_code == 2
    assert "Invalid value for --storage-option: 'retry_seconds' is not KEY=VALUE" in result.stderr

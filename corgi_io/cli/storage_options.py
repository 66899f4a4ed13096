"""`--storage-option KEY=VALUE` and `--storage-options FILE.json`: the storage options of a remote pack.

Shared by every command that reads a pack (`stats`, `verify`, `plan`). The options are the
`storage_options` of a `CorgiPileDataset`'s `Reading(storage_options=)`: fsspec's (s3fs's `endpoint_url`,
`key`, `client_kwargs`, ...) and corgi-io's own (`retry_seconds`, `headers`, ...). See docs/operations.md.
"""
from __future__ import annotations

import functools
import json

import click

OPTION_HELP = ("A storage option for a remote pack, KEY=VALUE (repeatable): VALUE is read as JSON when it "
               "parses (60, true, {\"a\": 1}), else as a string; a dotted KEY nests "
               "(client_kwargs.endpoint_url=URL). Example: endpoint_url=http://127.0.0.1:9000 for MinIO.")
FILE_HELP = "A JSON object of storage options; --storage-option settings are applied on top of it."


def with_storage_options(command):
    """Decorator: add `--storage-option` and `--storage-options` to a click command, which then receives
    one `storage_options` dict (empty when neither is given)."""
    @functools.wraps(command)
    def run(*args, storage_option_pairs, storage_options_file, **kwargs):
        options = parse_storage_options(storage_option_pairs, storage_options_file)
        return command(*args, storage_options=options, **kwargs)

    run = click.option("--storage-options", "storage_options_file", metavar="FILE.json", help=FILE_HELP,
                       type=click.Path(exists=True, dir_okay=False))(run)
    return click.option("--storage-option", "storage_option_pairs", metavar="KEY=VALUE", multiple=True,
                        help=OPTION_HELP)(run)


def parse_storage_options(pairs, path=None) -> dict:
    """The options of the JSON object in `path` (if any), with each "KEY=VALUE" of `pairs` set on top."""
    options = {}
    if path is not None:
        options = _read_json_object(path)
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key or "" in key.split("."):
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE (a dotted KEY nests: client_kwargs.endpoint_url=URL)",
                                     param_hint="--storage-option")
        _set_nested(options, key.split("."), _value(text), pair)
    return options


def _value(text: str):
    """JSON when it parses (numbers, true/false/null, objects, lists, quoted strings), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _set_nested(options: dict, keys: list, value, pair: str) -> None:
    """options[k1][k2]...[kn] = value, making the inner dicts; a non-dict on the way is a usage error."""
    for depth, key in enumerate(keys[:-1]):
        options = options.setdefault(key, {})
        if not isinstance(options, dict):
            raise click.BadParameter(f"{pair!r}: {'.'.join(keys[:depth + 1])} is already set to a value, "
                                     "not to options", param_hint="--storage-option")
    options[keys[-1]] = value


def _read_json_object(path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            options = json.load(f)
    except ValueError as exc:
        raise click.BadParameter(f"{path}: not JSON: {exc}", param_hint="--storage-options") from None
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror or exc}", param_hint="--storage-options") from None
    if not isinstance(options, dict):
        raise click.BadParameter(f"{path}: a JSON object of options is needed, not {type(options).__name__}",
                                 param_hint="--storage-options")
    return options

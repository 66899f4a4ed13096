"""The one error hierarchy: every error corgi-io raises on purpose is a CorgiError, exported from corgi_io."""
import click
import pytest

import corgi_io
from corgi_io.cli.errors import one_line_errors


@pytest.mark.parametrize("name,builtin", [
    ("ManifestError", ValueError), ("FormatError", ValueError), ("CorpusError", ValueError),
    ("BadInput", ValueError), ("PackError", RuntimeError), ("CorruptDataError", ValueError),
    ("StorageError", OSError),
])
def test_every_error_is_a_corgi_error_and_keeps_its_builtin_base(name, builtin):
    cls = getattr(corgi_io, name)
    assert issubclass(cls, corgi_io.CorgiError) and issubclass(cls, builtin)
    assert name in corgi_io.__all__


def test_corrupt_data_error_locates_the_sample():
    exc = corgi_io.CorruptDataError("bad", shard="shard-000000.tar", offset=1536, key="cat/1")
    assert (exc.shard, exc.offset, exc.key) == ("shard-000000.tar", 1536, "cat/1")


def test_cli_turns_corgi_errors_and_named_os_errors_into_one_line():
    with pytest.raises(click.ClickException, match="bad manifest"):
        with one_line_errors():
            raise corgi_io.ManifestError("bad manifest")
    with pytest.raises(click.ClickException, match="/out/shard.tar: No space left on device"):
        with one_line_errors():
            raise OSError(28, "No space left on device", "/out/shard.tar")


@pytest.mark.parametrize("bug", [ValueError("a bug"), OSError("no file named"), KeyError("x")])
def test_cli_keeps_the_traceback_of_anything_else(bug):
    with pytest.raises(type(bug)):
        with one_line_errors():
            raise bug


def test_plain_message_is_one_line_without_object_reprs():
    from corgi_io.errors import plain_message

    exc = OSError("cannot identify image file <_io.BytesIO object at 0x7f3a2c1b2e50>\nmore detail")
    assert plain_message(exc) == "OSError: cannot identify image file the data"
    assert plain_message(KeyError()) == "KeyError"

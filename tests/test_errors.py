"""The one error hierarchy: every error corgi-io raises on purpose is a CorgiError, exported from corgi_io."""
import click
import pytest

import corgi_io
from corgi_io.cli.errors import one_line_errors


@pytest.mark.parametrize("name,builtin", [
    ("ManifestError", ValueError), ("FormatError", ValueError), ("CorpusError", ValueError),
    ("BadInput", ValueError), ("PackError", RuntimeError), ("CorruptDataError", ValueError),
    ("DecodeError", ValueError), ("StorageError", OSError), ("ArgumentError", ValueError), ("ArgumentError", TypeError),
])
def test_every_error_is_a_corgi_error_and_keeps_its_builtin_base(name, builtin):
    cls = getattr(corgi_io, name)
    assert issubclass(cls, corgi_io.CorgiError) and issubclass(cls, builtin)
    assert name in corgi_io.__all__


@pytest.mark.parametrize("name", ["CorruptDataError", "DecodeError"])
def test_sample_errors_locate_the_sample(name):
    exc = getattr(corgi_io, name)("bad", shard="shard-000000.tar", offset=1536, key="cat/1")
    assert (exc.shard, exc.offset, exc.key, str(exc)) == ("shard-000000.tar", 1536, "cat/1", "bad")


def test_a_decode_failure_is_not_corruption():
    assert not issubclass(corgi_io.DecodeError, corgi_io.CorruptDataError)
    assert not issubclass(corgi_io.CorruptDataError, corgi_io.DecodeError)


def test_argument_errors_are_caught_as_value_and_type_errors():
    for builtin in (ValueError, TypeError):
        with pytest.raises(builtin, match="seed must be"):
            raise corgi_io.ArgumentError("seed must be an int >= 0, got 'x'")


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
    assert plain_message(exc) == "OSError: cannot identify image file"
    assert plain_message(ValueError("<Foo at 0xdead> broke  <bar object at 0x1>: why")) == "ValueError: broke: why"
    assert plain_message(KeyError()) == "KeyError"

"""Start-up stays light: `import corgi_io` and `corgi --help` load none of the heavy libraries,
and the lazily exported public names still resolve to the same objects."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

import click
import pytest

import corgi_io
from corgi_io.cli import SUBCOMMANDS, main

HEAVY = ("numpy", "torch", "fsspec", "aiohttp", "PIL", "cv2", "matplotlib", "tqdm", "crc32c")

LOADED_HEAVY = ("import json, sys; heavy = {heavy!r}; "
                "print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set(heavy))))")


def run_python(code: str) -> str:
    """Run `code` in a fresh interpreter; its stdout (it must exit 0)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def heavy_modules_after(code: str) -> list[str]:
    """Run `code` in a fresh interpreter and list the heavy top-level packages it left in sys.modules."""
    return json.loads(run_python(f"{code}\n{LOADED_HEAVY.format(heavy=HEAVY)}").splitlines()[-1])


@pytest.mark.slow
def test_import_corgi_io_loads_nothing_heavy():
    assert heavy_modules_after("import corgi_io, corgi_io.cli") == []


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["stats", "--help"], ["plan", "--help"], ["verify", "--help"],
                                  ["profile", "--help"]])
def test_corgi_help_loads_nothing_heavy(argv):
    code = (f"import sys; from corgi_io.cli import main; sys.argv = ['corgi', *{argv!r}]\n"
            "try:\n    main()\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code")
    assert heavy_modules_after(code) == []


def test_public_names_resolve_lazily_to_the_library_objects():
    from corgi_io.manifest import Manifest, open_manifest
    from corgi_io.packing import PackOptions, pack
    from corgi_io.report.verify import verify

    assert (corgi_io.Manifest, corgi_io.open_manifest, corgi_io.PackOptions, corgi_io.pack, corgi_io.verify) == \
        (Manifest, open_manifest, PackOptions, pack, verify)
    assert set(corgi_io.__all__) <= set(dir(corgi_io))
    with pytest.raises(AttributeError, match="no_such_name"):
        corgi_io.no_such_name


@pytest.mark.slow
def test_no_public_function_hides_a_submodule_of_the_same_name():
    run_python("import inspect, pkgutil, corgi_io, corgi_io.report.verify, corgi_io.packing as packing\n"
               "modules = {m.name for m in pkgutil.iter_modules(corgi_io.__path__)}\n"
               "assert not modules & set(corgi_io.__all__), modules & set(corgi_io.__all__)\n"
               "assert inspect.isfunction(corgi_io.verify) and inspect.isfunction(corgi_io.pack)\n"
               "assert inspect.ismodule(packing)")


def test_every_listed_subcommand_resolves_to_its_click_command():
    context = click.Context(main)
    for name in SUBCOMMANDS:
        command = main.get_command(context, name)
        assert isinstance(command, click.Command) and command.name == name
    assert main.get_command(context, "nope") is None
    assert inspect.isfunction(main.callback)

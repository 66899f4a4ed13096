"""Code a user names on the command line as ``MODULE:FUNCTION`` (`--size-fn`, `--map`), imported where it runs.

The module must be importable by every worker that runs the pack's tasks (on its sys.path; not
``__main__``).  It is imported once in the driver, so that a typo fails before any work.
"""
from __future__ import annotations

import importlib

from corgi_io.errors import PackError, plain_message


def load_function(spec: str, option: str):
    """The callable ``module:function`` names; PackError naming `option` and `spec` if it cannot be had."""
    module_name, _, function_name = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module_name or not function_name:
        raise PackError(f"{option} {spec!r}: expected MODULE:FUNCTION")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except Exception as exc:  # importing runs the module's code, which may raise anything
        raise PackError(f"{option} {spec!r}: {plain_message(exc)}") from None
    if not callable(function):
        raise PackError(f"{option} {spec!r} is not callable")
    return function

"""Checks of the arguments users pass, made where the argument is taken (a constructor, a CLI option),
so that a bad one fails at once with an `ArgumentError` naming it, not later in a DataLoader worker.

Each check raises ``ArgumentError("<name> must be ..., got <value>")`` (a ValueError and a
TypeError too) and returns the value in its plain form.  No torch, no numpy: numpy integers are
`numbers.Integral`, and a numpy bool is recognised by its dtype.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

from corgi_io.errors import ArgumentError

RETRY_SETTINGS = ("retry_seconds", "open_retry_seconds", "backoff", "max_backoff")


def choose(name: str, value, choices):
    """The entry named `value` of `choices`: a registry (a mapping of names to implementations) or a
    tuple of names, which gives `value` back.  ArgumentError listing every choice otherwise.

    Registries are how algorithms are chosen (shuffle and balance modes, shard formats): adding a
    mode is one entry, and this message names it with the rest.
    """
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return choices[value] if isinstance(choices, Mapping) else value


def check_at_least(name: str, value, least: int, *, optional: bool = True):
    """`value` as an int >= `least`; None passes ("not given") when `optional`.

    numpy integers are accepted; bools, floats (even 2.0) and strings are refused, so that
    nothing is truncated or parsed behind the user's back.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{name} must be an int >= {least}{' or None' if optional else ''}, got {value!r}")
    if value < least:
        raise ArgumentError(f"{name} must be >= {least}{' or None' if optional else ''}, got {value!r}")
    return int(value)


def check_number(name: str, value, least: float = 0.0, *, strict: bool = False) -> float:
    """`value` as a float >= `least` (> `least` when `strict`); bools, strings, None and NaN are refused."""
    bound = f"{'>' if strict else '>='} {least:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ArgumentError(f"{name} must be a number {bound}, got {value!r}")
    if value < least or (strict and value == least):
        raise ArgumentError(f"{name} must be {bound}, got {value!r}")
    return float(value)


def check_flag(name: str, value) -> bool:
    """`value` as a bool: True or False (or a numpy bool), not 0, 1 or a string."""
    if not isinstance(value, bool) and getattr(getattr(value, "dtype", None), "kind", None) != "b":
        raise ArgumentError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_callable(name: str, value, *, optional: bool = False) -> None:
    """ArgumentError unless `value` is callable (or None when `optional`)."""
    if not callable(value) and not (optional and value is None):
        raise ArgumentError(f"{name} must be a callable{' or None' if optional else ''}, got {value!r}")


def check_mapping(name: str, value, *, optional: bool = True) -> dict:
    """`value` as a dict (None: empty when `optional`); anything else is refused."""
    if value is None and optional:
        return {}
    if not hasattr(value, "keys") or not hasattr(value, "__getitem__"):
        raise ArgumentError(f"{name} must be a dict{' or None' if optional else ''}, got {value!r}")
    return dict(value)


def check_storage_options(options: dict) -> None:
    """The retry settings among `options`: numbers >= 0 (0 turns retrying, or waiting, off).

    Checked where the options are taken (`open_storage`, `RetryingStorage`), for every pack
    location: local storage ignores them, but a wrong one is wrong wherever the pack lives.
    (`timeout` is HttpStorage's to check: fsspec's backends take other forms of it.)
    """
    for name in RETRY_SETTINGS:
        if name in options:
            check_number(name, options[name])

"""The names of the shuffle and balance modes, the check that a mode is known, and the check of a count argument."""
from __future__ import annotations

import numbers

SHUFFLE_MODES = ("corgipile", "block", "none", "window", "full")
BALANCE_MODES = ("count", "size", "dynamic")


def check_mode(name: str, value, modes: tuple) -> None:
    """ValueError naming the argument and the choices when `value` is not one of `modes`."""
    if value not in modes:
        raise ValueError(f"{name} must be one of {modes}, got {value!r}")


def check_at_least(name: str, value, least: int) -> None:
    """ValueError naming the argument when `value` is not an integer >= `least` (None passes: "not given")."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")

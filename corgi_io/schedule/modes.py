"""The names of the shuffle and balance modes, and the one check that a mode is known."""
from __future__ import annotations

SHUFFLE_MODES = ("corgipile", "block", "none", "window", "full")
BALANCE_MODES = ("count", "size", "dynamic")


def check_mode(name: str, value, modes: tuple) -> None:
    """ValueError naming the argument and the choices when `value` is not one of `modes`."""
    if value not in modes:
        raise ValueError(f"{name} must be one of {modes}, got {value!r}")

"""The names of the shuffle and balance modes; `check_mode` and `check_at_least` (from `corgi_io.arguments`)
refuse an unknown mode or a count out of range with an ArgumentError naming the argument."""
from __future__ import annotations

from corgi_io.arguments import check_at_least, check_mode

SHUFFLE_MODES = ("corgipile", "block", "none", "window", "full")
BALANCE_MODES = ("count", "size", "dynamic")

__all__ = ["BALANCE_MODES", "SHUFFLE_MODES", "check_at_least", "check_mode"]

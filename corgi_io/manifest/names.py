"""The one rule for names inside a pack: sample keys and shard paths.

A name is a relative POSIX path: not empty, no leading '/', no empty, '.' or '..'
components, no control characters (newline included), and valid UTF-8 (no lone
surrogates).  A tar member so named always extracts inside the target folder, and a shard
so named always lies inside the pack root.  `corgi pack` escapes or refuses keys that break
it; `open_manifest` refuses shard paths that break it (or that are URLs).
"""
from __future__ import annotations

import re

CONTROL_CHARACTERS = "\x00-\x1f\x7f-\x9f"
_CONTROL_CHAR = re.compile(f"[{CONTROL_CHARACTERS}]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def key_problem(key: str) -> str | None:
    """How `key` breaks the name rule (see the module docstring), or None when it obeys it."""
    if not key:
        return "is empty"
    if key.startswith("/"):
        return "starts with '/'"
    bad = next((part for part in key.split("/") if part in ("", ".", "..")), None)
    if bad is not None:
        return f"has a '{bad}' component" if bad else "has an empty component"
    if _CONTROL_CHAR.search(key):
        return "has a control character"
    if _SURROGATE.search(key):
        return "is not valid UTF-8"
    return None


def shard_path_problem(path: str) -> str | None:
    """How a manifest's shard path breaks the name rule or names a URL, or None when it is safe."""
    return "is a URL" if _URL_SCHEME.match(path) else key_problem(path)

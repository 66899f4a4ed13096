"""What the readers of shards and tables share: checks of keys, labels and field mappings, skips, opening a file.

Bad inputs follow the corpus rules: one input that cannot be read (a member, a record, a row group) is
skipped with a one-line warning naming the file and the member, byte offset or row group, or raises
BadInput under `strict` (`skip_or_raise`).
"""
from __future__ import annotations

from corgi_io.errors import ArgumentError, BadInput
from corgi_io.manifest.fields import check_field_name
from corgi_io.manifest.names import key_problem
from corgi_io.packing.sample import PackSample

MAX_LABEL = 2 ** 31 - 1  # the manifest's labels are int32; -1 is "unlabeled"


def check_field_mapping(argument: str, mapping, what: str) -> dict:
    """`mapping` if it maps field names, 'label' or 'key' to non-empty `what`s (feature or column names) and
    names at least one field; ArgumentError naming `argument` otherwise."""
    if not isinstance(mapping, dict) or not mapping:
        raise ArgumentError(f"{argument} must map field names to {what}s, got {mapping!r}")
    for name, target in mapping.items():
        if not isinstance(target, str) or not target:
            raise ArgumentError(f"{argument}[{name!r}] must be a {what}, got {target!r}")
        if name not in ("label", "key"):
            try:
                check_field_name(name)
            except BadInput as exc:
                raise ArgumentError(f"{argument}: {exc}") from None
    if set(mapping) <= {"label", "key"}:
        raise ArgumentError(f"{argument} {mapping!r} maps no field (only label and key)")
    return mapping


def check_label(value) -> int:
    """A class id from an int or decimal ASCII digits (bytes or str, blanks around allowed): 0 to MAX_LABEL
    (the manifest's label is int32); BadInput otherwise."""
    if isinstance(value, (bytes, str)):
        digits = value.strip()
        if not digits.isdigit() or not digits.isascii() or len(digits) > 10:
            raise BadInput(f"label {value[:20]!r} is not an integer from 0 to {MAX_LABEL}")
        value = int(digits)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LABEL:
        raise BadInput(f"label {value!r} is not an integer from 0 to {MAX_LABEL}")
    return value


def checked_key(key) -> str:
    """`key` if it is text obeying the key rule of `manifest.names`; BadInput saying how it breaks it otherwise."""
    if not isinstance(key, str):
        raise BadInput(f"key {key!r} is {type(key).__name__}, not text")
    problem = key_problem(key)
    if problem is not None:
        raise BadInput(f"key {key!r} {problem}")
    return key


def sample_from_values(values: dict, default_key: str) -> PackSample:
    """The PackSample of one row's mapped values: 'key' and 'label' taken out (absent or None: `default_key`,
    unlabeled), text fields encoded UTF-8, None fields left out; BadInput naming what is wrong."""
    key, label = values.pop("key", None), values.pop("label", None)
    fields = {name: value.encode("utf-8") if isinstance(value, str) else value
              for name, value in values.items() if value is not None}
    return PackSample(checked_key(default_key if key is None else key), -1 if label is None else check_label(label),
                      fields)


def skip_or_raise(message: str, strict: bool, on_skip) -> None:
    """One bad input: BadInput(message) under `strict`, else `on_skip(message)` (default: a warning line)."""
    if strict:
        raise BadInput(message)
    if on_skip is None:
        from corgi_io.packing.skip_reasons import warn

        on_skip = warn
    on_skip(f"skipped {message}")


def open_binary(path: str):
    """A binary file object for a local path or an fsspec URL (fsspec imported only for URLs)."""
    if "://" not in path:
        return open(path, "rb")
    import fsspec

    return fsspec.open(path, "rb").open()



"""A sample as the pack's workers see it: a key, a label and its fields, each a (name, bytes) pair.

A field is named by its extension in the WebDataset sense: ``jpg``, ``txt``, ``json``, ``cls``,
``tokens.npy``.  A WebDataset shard holds one tar member ``<key>.<field>`` per field; a TFRecord
holds one feature per field.  One field is the sample's **primary** field: its kind and its size
(pixels, frames, tokens) drive balance and statistics.  Sources (folders, listings, tars,
TFRecords, tables) produce `PackSample`s; transforms map them to new ones (or drop them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from corgi_io.errors import BadInput

FIELD_KINDS = {
    "image": ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"),
    "video": ("mp4", "avi", "mkv", "mov", "webm"),
    "text": ("txt", "md", "json", "jsonl"),
}
KIND_OF_FIELD = {name: kind for kind, names in FIELD_KINDS.items() for name in names}
PRIMARY_ORDER = ("image", "video", "text")  # the default primary field: the first image, else video, else text
MAX_FIELD_NAME = 64
_FIELD_NAME = re.compile(r"[a-z0-9_]+(?:[.-][a-z0-9_]+)*")  # lower case; dots and dashes only between parts


def check_field_name(name) -> str:
    """`name` if it can name a field (and so a tar member suffix and a TFRecord feature); BadInput otherwise.

    Lower-case letters, digits and underscores, in parts joined by dots or dashes: no slash, no
    leading dot, nothing a tar reader could take for a path, at most MAX_FIELD_NAME characters.
    """
    if not isinstance(name, str) or len(name) > MAX_FIELD_NAME or not _FIELD_NAME.fullmatch(name):
        raise BadInput(f"field name {name!r} is not lower-case letters, digits and '_' in parts joined by '.' "
                       f"or '-' (at most {MAX_FIELD_NAME} characters)")
    return name


def field_kind(name: str) -> str | None:
    """The kind of a field by its last extension (``tokens.npy`` -> None, ``jpg`` -> "image"); None: not a media kind."""
    return KIND_OF_FIELD.get(name.rsplit(".", 1)[-1])


def default_primary(names) -> str | None:
    """The default primary field among `names` (in order): the first image field, else video, else text; None if
    no field has a media kind."""
    for kind in PRIMARY_ORDER:
        for name in names:
            if field_kind(name) == kind:
                return name
    return None


@dataclass(frozen=True)
class PackSample:
    """One sample on its way into a shard: fields in their order (a dict keeps it), `label` -1 when unlabeled."""

    key: str
    label: int
    fields: dict

    def __post_init__(self):
        for name, data in self.fields.items():
            check_field_name(name)
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise BadInput(f"sample {self.key!r}: field {name!r} holds {type(data).__name__}, not bytes")
        if not self.fields:
            raise BadInput(f"sample {self.key!r} has no field")

    def primary(self, preferred: str | None = None) -> str | None:
        """The name of the primary field: `preferred` when the sample has it, else `default_primary`."""
        if preferred is not None and preferred in self.fields:
            return preferred
        return default_primary(self.fields)

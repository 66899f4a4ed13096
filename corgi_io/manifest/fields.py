"""The field vocabulary that `corgi pack` writes and every reader reads: field names, their kinds, the primary.

A field is named by its extension in the WebDataset sense: ``jpg``, ``txt``, ``json``, ``cls``,
``tokens.npy``.  Its last extension gives its kind (image, video, text, or none); a sample's primary
field's kind is the manifest's ``kind`` column, an index into `KINDS`.
"""
from __future__ import annotations

import re

from corgi_io.errors import BadInput

KINDS = ("image", "video", "text")  # the manifest's kind column indexes this tuple: never reorder it
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

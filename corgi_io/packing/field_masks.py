"""Which fields each written sample has, as a pack task sees them and as the manifest records them.

A task does not know the pack's field names in advance (a user's ``--map`` or a source's samples
may make any), so it numbers the names it meets itself: `TaskNames` gives each sample's field
mask and primary extension id in the task's own numbering, and the task's record keeps the names.
The driver makes the pack's lists (the names it knew, then the others in record order) and maps
each record's columns onto them with a lookup of a few entries per record (`remap_masks`,
`remap_ids`): nothing per sample in Python.
"""
from __future__ import annotations

import numpy as np

from corgi_io.errors import BadInput, PackError

MAX_FIELDS = 64  # a field mask is 64 bits


class TaskNames:
    """The field names and primary extensions one task has met, numbered in the order met."""

    def __init__(self):
        self.bits, self.extensions = {}, {}

    def mask(self, names) -> int:
        """The task's mask of fields `names` of one sample; BadInput when they would make more than MAX_FIELDS."""
        mask = 0
        for name in names:
            bit = self.bits.setdefault(name, len(self.bits))
            if bit >= MAX_FIELDS:
                del self.bits[name]
                raise BadInput(f"field {name!r} would be field number {bit + 1}, above the "
                               f"{MAX_FIELDS} field names a pack may have")
            mask |= 1 << bit
        return mask

    def ext(self, primary: str) -> int:
        """The task's id of the primary field name `primary`."""
        return self.extensions.setdefault(primary, len(self.extensions))


def pack_names(known, found) -> list:
    """The pack's names: those of `found` (each record's names, in record order), in the order of `known` (the
    driver's, which it knows before any task runs) and then as first met."""
    found = list(dict.fromkeys(name for names in found for name in names))
    return [name for name in dict.fromkeys([*known, *found]) if name in set(found)]


def check_field_count(names: list) -> list:
    """`names` if a 64-bit mask can hold them; PackError naming them otherwise."""
    if len(names) > MAX_FIELDS:
        raise PackError(f"the samples hold {len(names)} field names, above the {MAX_FIELDS} a pack may have: "
                        f"{', '.join(names[:MAX_FIELDS + 1])}, ...")
    return names


def remap_masks(masks: np.ndarray, local: tuple, names: list) -> np.ndarray:
    """A record's masks (bit i: its field local[i]) as masks of the pack's `names`."""
    moved, one = np.zeros_like(masks), np.uint64(1)
    for bit, name in enumerate(local):
        moved |= ((masks >> np.uint64(bit)) & one) << np.uint64(names.index(name))
    return moved


def remap_ids(ids: np.ndarray, local: tuple, names: list) -> np.ndarray:
    """A record's ids (id i: local[i]) as indices into the pack's `names`."""
    return np.array([names.index(name) for name in local] or [0], dtype=ids.dtype)[ids]

"""A sample as the pack's workers see it: a key, a label and its fields, each a (name, bytes) pair.

Fields are named and kinded by the manifest's vocabulary (`corgi_io.manifest.fields`).  A WebDataset
shard holds one tar member ``<key>.<field>`` per field; a TFRecord holds one feature per field.  One field is the sample's **primary** field: its kind and its size
(pixels, frames, tokens) drive balance and statistics.  Sources (folders, listings, tars,
TFRecords, tables) produce `PackSample`s; transforms map them to new ones (or drop them).
"""
from __future__ import annotations

from dataclasses import dataclass

from corgi_io.errors import BadInput
from corgi_io.manifest.fields import check_field_name, default_primary


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

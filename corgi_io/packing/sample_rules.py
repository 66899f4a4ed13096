"""What a sample read from existing shards or tables goes through before it is encoded.

In order: ``--require`` (a sample without a required field is left out), the primary field
(``--primary``, else the first field of ``--kind``, else the first image, video or text field),
the reserved names and ``--max-sample-bytes`` on every field, the primary field's size (pixels,
frames, tokens; ``--max-pixels``), the pack-time transforms, and the ``--min-size``/``--max-size``
filter on the final size.  A sample left out by a rule (--require, --primary, --kind, a transform's
Drop, the size filter) is a skip record, never fatal; a bad one (a reserved field, a field too
large, a primary field that does not decode, a transform's BadInput) is a skip record too, or a
PackError under strict.  The folder walk applies the same rules in `grouping.py` and `encode.py`,
where they can act on a file before it is read.
"""
from __future__ import annotations

from corgi_io.errors import BadInput, PackError
from corgi_io.formats import RESERVED_FIELDS
from corgi_io.manifest import KINDS
from corgi_io.packing.grouping import too_large_reason
from corgi_io.packing.sample import PackSample, default_primary, field_kind
from corgi_io.packing.sizing import probe_size

MAX_SOURCE_LABEL = (1 << 20) - 1  # the manifest names every class id up to the largest ("0".."N"): kept bounded


class SampleRules:
    """The rules of one pack's options; `accept(sample)` applies them to one sample."""

    def __init__(self, options, strict: bool):
        self.options, self.strict = options, strict
        self.transforms, self.size_filter = options.transforms(), options.size_filter()
        self.primary_after = options.primary_after()

    def accept(self, sample: PackSample):
        """(primary field, kind id, size, fields) of the sample as it is to be packed, or {"reason": ...}: its skip.

        PackError naming the key under strict, for a bad sample (not for one a rule leaves out)."""
        try:
            return self._accept(sample)
        except BadInput as exc:
            if self.strict:
                raise PackError(f"sample {sample.key!r}: {exc}") from None
            return {"reason": str(exc)}

    def primary_field(self, sample: PackSample) -> str | None:
        """The sample's primary field by the rules (--require, --primary, --kind), or None when they leave it out."""
        if any(name not in sample.fields for name in self.options.require):
            return None
        chosen = self._primary(sample.fields)
        return None if isinstance(chosen, dict) else chosen[0]

    def _accept(self, sample: PackSample):
        fields = sample.fields
        missing = [name for name in self.options.require if name not in fields]
        if missing:
            return {"reason": f"has no field {', '.join(map(repr, missing))} (--require)"}
        chosen = self._primary(fields)
        if isinstance(chosen, dict):
            return chosen
        primary, kind = chosen
        _check_fields(fields, self.options.max_sample_bytes, sample.label)
        size = probe_size(kind, None, fields[primary], None, self.options.max_pixels)
        if self.transforms.steps:
            result = self.transforms(sample)
            if not result:
                return {"reason": result.reason}
            fields, primary = result.sample.fields, self.primary_after or self.options.renamed(primary)
            if primary not in fields:
                raise BadInput(f"has no field {primary!r} after the transforms")
            size, kind = result.sizes.get(primary, size), "text" if self.primary_after else kind
        dropped = self.size_filter.check(sample.key, size) if self.size_filter else None
        if dropped is not None:
            return {"reason": dropped.reason}
        return primary, KINDS.index(kind), size, fields

    def _primary(self, fields: dict):
        """(primary field, its kind), or the skip of a sample that has none by the options' rule."""
        wanted, kind = self.options.primary, self.options.kind
        if wanted is not None:
            if wanted not in fields:
                return {"reason": f"has no field {wanted!r} (--primary)"}
            found = field_kind(wanted) or (kind if kind != "auto" else None)
            return (wanted, found) if found else {"reason": f"its primary field {wanted!r} is not an image, video "
                                                            "or text (name one with --kind)"}
        if kind != "auto":
            named = [name for name in fields if field_kind(name) == kind]
            if named:
                return named[0], kind
            if not any(field_kind(name) for name in fields):
                return next(iter(fields)), kind  # no field names a kind: its first is taken as --kind
            return {"reason": f"has no {kind} field (--kind)"}
        primary = default_primary(fields)
        return (primary, field_kind(primary)) if primary else {"reason": "has no image, video or text field"}


def _check_fields(fields: dict, most: int, label: int) -> None:
    """BadInput for a field with a reserved name or above `most` bytes, or a label above MAX_SOURCE_LABEL."""
    for name, value in fields.items():
        if name in RESERVED_FIELDS:
            raise BadInput(f"field {name!r} is reserved ({', '.join(sorted(RESERVED_FIELDS))})")
        if len(value) > most:
            raise BadInput(f"field {name!r}: {too_large_reason(len(value), most)}")
    if label > MAX_SOURCE_LABEL:
        raise BadInput(f"label {label:,} is above the {MAX_SOURCE_LABEL + 1:,} classes a pack of sources names")

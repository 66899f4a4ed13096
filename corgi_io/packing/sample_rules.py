"""What a sample read from existing shards or tables goes through before it is encoded.

In order: ``--require`` (a sample without a required field is left out), the primary field
(``--primary``, else the first field of ``--kind``, else the first image, video or text field),
a field other than the primary with a reserved name left out (`skip_reasons.unusable_extra`, the folder
walk's rule too: a skip record, the sample kept, even under strict), ``--max-sample-bytes`` on every
field, the primary field's size (pixels, frames, tokens; ``--max-pixels``), the pack-time transforms,
and the ``--min-size``/``--max-size`` filter on the final size.  A sample left out by a rule
(--require, --primary, --kind, a transform's Drop, the size filter) is a skip record, never fatal; a
bad one (a primary named ``cls``, a field too large, a primary field that does not decode, a
transform's BadInput, a reserved field in what the transforms return) is a skip record too, or a
PackError under strict.  The folder walk applies the input rules in `grouping.py` and `sources/folder.py`,
where they can act on a file before it is read.

What the transforms return goes through `OutputRules`, which the one write task (unit_task.py) runs on
every sample, whatever its source: the primary field they leave, its kind and size,
and `check_fields` on the fields as they will be written, whatever made them (a source, a resize,
a tokenizer, a user's ``--map``).
"""
from __future__ import annotations

from dataclasses import dataclass

from corgi_io.errors import BadInput
from corgi_io.manifest.fields import default_primary, field_kind
from corgi_io.packing.skip_reasons import (RESERVED_NAMES, RESERVED_PRIMARY, reserved_reason, too_large_reason,
                                          unusable_extra)
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sizing import probe_size
from corgi_io.packing.transforms import SizeFilter, TransformChain
from corgi_io.packing.transforms.image import renamed_field

MAX_SOURCE_LABEL = (1 << 20) - 1  # the manifest names every class id up to the largest ("0".."N"): kept bounded


def check_fields(fields: dict, primary: str, most: int) -> None:
    """BadInput naming the field when `fields` cannot be written as they are: a field other than `primary` with a
    reserved name (it would overwrite the loader's own keys, or be a second ``.cls`` member), a primary named
    ``cls``, or a field above `most` bytes (--max-sample-bytes, the rule the input obeys)."""
    for name, value in fields.items():
        if name in (RESERVED_PRIMARY if name == primary else RESERVED_NAMES):
            raise BadInput(reserved_reason(name))
        if len(value) > most:
            raise BadInput(f"field {name!r}: {too_large_reason(len(value), most)}")


@dataclass(frozen=True)
class OutputRules:
    """The pack-time transforms and the size filter, and what is asked of what they return; `apply` runs them.

    Every write task runs them through here, so that a sample's final fields are checked the same way whatever
    source and transform made them.  Small and picklable (a shard task carries one): only the values it needs, and
    the input limits (max_pixels, max_sample_bytes) a shard task reads files by."""

    transforms: TransformChain = TransformChain()
    size_filter: SizeFilter | None = None
    primary_after: str | None = None   # the primary field the transforms make (tokens.npy), or None
    image_format: str = "keep"         # what image fields are renamed for (PackOptions.image_renaming)
    max_pixels: int | None = None
    max_sample_bytes: int = 1 << 62

    @classmethod
    def of(cls, options) -> OutputRules:
        """The rules of a pack's `options` (PackOptions)."""
        return cls(options.transforms(), options.size_filter(), options.primary_after(), options.image_renaming(),
                   options.max_pixels, options.max_sample_bytes)

    def __bool__(self) -> bool:
        """False when there is nothing to run: the sample is written as read."""
        return bool(self.transforms.steps) or self.size_filter is not None

    def apply(self, sample: PackSample, primary: str, kind: str, size: int):
        """(primary field, kind, fields, size) of `sample` (whose primary is `primary`, of `kind` and `size`) after the
        transforms, or the Drop of a sample they or the size filter leave out; BadInput for one that cannot be packed.

        The primary field is the one they make (tokens.npy), else `primary` as they renamed it, else (a --map took
        it away) the first image, video or text field left.  A primary whose bytes they replaced without measuring
        them is probed again (`path` names it for a --size-fn)."""
        result = self.transforms(sample) if self.transforms.steps else None
        if result is not None and not result:
            return result
        if result is not None:
            primary, kind, size = self._primary(result, sample.fields.get(primary), primary, kind, size)
            sample = result.sample
        dropped = self.size_filter.check(sample.key, size) if self.size_filter else None
        return dropped if dropped is not None else (primary, kind, sample.fields, size)

    def _primary(self, result, before, primary: str, kind: str, size: int) -> tuple:
        """(primary, kind, size) of a transformed sample, its fields checked (`check_fields`)."""
        fields = result.sample.fields
        primary = self.primary_after or renamed_field(primary, self.image_format)
        if primary not in fields:
            primary = default_primary(fields)
            if primary is None:
                raise BadInput(f"has no image, video or text field after the transforms (fields {list(fields)})")
        try:
            check_fields(fields, primary, self.max_sample_bytes)
        except BadInput as exc:
            raise BadInput(f"after the transforms: {exc}") from None
        kind = "text" if self.primary_after else field_kind(primary) or kind
        if primary in result.sizes:
            size = result.sizes[primary]
        elif fields[primary] is not before:
            size = probe_size(kind, None, fields[primary], None, self.max_pixels)
        return primary, kind, size


class SampleRules:
    """The input rules of one pack's options; `admit(sample)` applies them to one sample read from a unit."""

    def __init__(self, options):
        self.options = options

    def admit(self, sample: PackSample):
        """(primary field, kind, size, fields, [{"reason": ...}] of the fields left out) of the sample as it comes in,
        or {"reason": ...}: the skip of one a rule leaves out; BadInput for a bad one (a skip, or fatal under strict).
        The transforms and the size filter (`OutputRules`) run after, in the write task."""
        fields = sample.fields
        missing = [name for name in self.options.require if name not in fields]
        if missing:
            return {"reason": f"has no field {', '.join(map(repr, missing))} (--require)"}
        chosen = self._primary(fields)
        if isinstance(chosen, dict):
            return chosen
        primary, kind = chosen
        fields, dropped = _usable_fields(fields, primary)
        check_fields(fields, primary, self.options.max_sample_bytes)
        if sample.label > MAX_SOURCE_LABEL:
            raise BadInput(f"label {sample.label:,} is above the {MAX_SOURCE_LABEL + 1:,} classes a pack of sources "
                           "names")
        return primary, kind, probe_size(kind, None, fields[primary], None, self.options.max_pixels), fields, dropped

    def primary_field(self, sample: PackSample) -> str | None:
        """The sample's primary field by the rules (--require, --primary, --kind), or None when they leave it out."""
        if any(name not in sample.fields for name in self.options.require):
            return None
        chosen = self._primary(sample.fields)
        return None if isinstance(chosen, dict) else chosen[0]

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


def _usable_fields(fields: dict, primary: str) -> tuple:
    """(`fields` less those read with a name only the primary may take, [{"reason": ...}] for each left out): the
    rule of `skip_reasons.unusable_extra`, the folder walk's too; the sample is packed without them."""
    reasons = {name: reason for name in fields if name != primary and (reason := unusable_extra(name)) is not None}
    if not reasons:
        return fields, []
    kept = {name: value for name, value in fields.items() if name not in reasons}
    return kept, [{"reason": reason} for reason in reasons.values()]

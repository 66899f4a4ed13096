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
PackError under strict.  Which field is primary, its kind and --require are `FieldRule`'s, one pure rule over
a sample's field names that the folder walk (grouping.py) runs on each sample's file names before any plan,
and `SampleRules` on each sample a unit of shards or tables reads.

What the transforms return goes through `OutputRules`, which the one write task (unit_task.py) runs on
every sample, whatever its source: the primary field they leave, its kind and size,
and `check_fields` on the fields as they will be written, whatever made them (a source, a resize,
a tokenizer, a user's ``--map``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from corgi_io.errors import BadInput
from corgi_io.manifest.fields import default_primary, field_kind
from corgi_io.packing.skip_reasons import RESERVED_NAMES, RESERVED_PRIMARY, reserved_reason, too_large, unusable_extra
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
        reason = too_large(len(value), most)
        if reason is not None:
            raise BadInput(f"field {name!r}: {reason}")


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


class Refused(NamedTuple):
    """Why `FieldRule` leaves a sample out: the option that does (`rule`: "require", "primary", "reserved", "kind"
    or "media") and the sample's skip reason."""

    rule: str
    reason: str


@dataclass(frozen=True)
class FieldRule:
    """The one rule of --require, --primary and --kind over a sample's field names: pure, names in and a decision
    out, so that the folder walk (grouping.py) decides each sample's primary field and kind before any plan, a
    column at a time, and `SampleRules` each sample a unit of shards or tables reads, alike."""

    kind: str = "auto"
    primary: str | None = None
    require: tuple = ()

    @classmethod
    def of(cls, options) -> FieldRule:
        """The rule of a pack's `options` (PackOptions)."""
        return cls(options.kind, options.primary, tuple(options.require))

    def choose(self, names: list):
        """(index of the primary field among `names`, its kind), or the `Refused` of a sample the options leave out.

        In order: a sample without a --require'd field; the --primary field, else the first field of --kind (a
        sample none of whose fields names a kind takes its first as --kind), else the first image, video or text
        field (`default_primary`); a primary of another kind than --kind; a primary named ``cls``."""
        missing = self.missing(names)
        if missing is not None:
            return Refused("require", missing)
        index = self._primary_index(names)
        kind = None if index is None else field_kind(names[index]) or (None if self.kind == "auto" else self.kind)
        if kind is None or self.kind not in ("auto", kind):
            return self._refused(names)
        if names[index] in RESERVED_PRIMARY:  # a label member's name, not a primary field's
            return Refused("reserved", reserved_reason(names[index]))
        return index, kind

    def missing(self, names) -> str | None:
        """The skip reason of a sample of fields `names` that lacks a --require'd field; None when it has them all."""
        absent = [name for name in self.require if name not in names]
        if not absent:
            return None
        quoted = ", ".join(f"'{name}'" for name in absent)
        return f"no field {quoted} (--require {','.join(self.require)})"

    def file_reason(self, refused: Refused, field: str, ext: str) -> str:
        """The skip reason of one file of a sample `refused` (a folder's, of field `field` and extension `ext`):
        under --kind what kind it is, without a media field its extension; else the sample's."""
        if refused.rule == "kind":
            kind = field_kind(field)
            what = f"a {kind} file" if kind else f"a field of a sample without {self.kind} files"
            return f"{what}: --kind {self.kind} keeps only {self.kind} files"
        if refused.rule == "media":
            return f"unknown extension '.{ext}'" if ext else "no extension"
        return f"its sample {refused.reason}" if refused.rule == "primary" else refused.reason

    def _primary_index(self, names: list) -> int | None:
        if self.primary is not None:
            return names.index(self.primary) if self.primary in names else None
        if self.kind == "auto":
            name = default_primary(names)
            return None if name is None else names.index(name)
        kinds = [field_kind(name) for name in names]
        return next((i for i, kind in enumerate(kinds) if kind == self.kind), None if any(kinds) else 0)

    def _refused(self, names: list) -> Refused:
        if self.primary is not None:
            return Refused("primary", f"has no usable primary field '{self.primary}' (--primary)")
        if self.kind != "auto":
            return Refused("kind", f"has no {self.kind} field (--kind {self.kind})")
        return Refused("media", "has no image, video or text field")


class SampleRules:
    """The input rules of one pack's options; `admit(sample)` applies them to one sample read from a unit."""

    def __init__(self, options):
        self.options, self.fields = options, FieldRule.of(options)

    def admit(self, sample: PackSample):
        """(primary field, kind, size, fields, [{"reason": ...}] of the fields left out) of the sample as it comes in,
        or {"reason": ...}: the skip of one a rule leaves out (`FieldRule`); BadInput for a bad one (a skip, or
        fatal under strict).  The transforms and the size filter (`OutputRules`) run after, in the write task."""
        names = list(sample.fields)
        chosen = self.fields.choose(names)
        if isinstance(chosen, Refused):
            return {"reason": chosen.reason}
        primary, kind = names[chosen[0]], chosen[1]
        fields, dropped = _usable_fields(sample.fields, primary)
        check_fields(fields, primary, self.options.max_sample_bytes)
        if sample.label > MAX_SOURCE_LABEL:
            raise BadInput(f"label {sample.label:,} is above the {MAX_SOURCE_LABEL + 1:,} classes a pack of sources "
                           "names")
        return primary, kind, probe_size(kind, None, fields[primary], None, self.options.max_pixels), fields, dropped

    def primary_field(self, sample: PackSample) -> str | None:
        """The sample's primary field by `FieldRule` (--require, --primary, --kind), or None when it leaves it out."""
        names = list(sample.fields)
        chosen = self.fields.choose(names)
        return None if isinstance(chosen, Refused) else names[chosen[0]]


def _usable_fields(fields: dict, primary: str) -> tuple:
    """(`fields` less those read with a name only the primary may take, [{"reason": ...}] for each left out): the
    rule of `skip_reasons.unusable_extra`, the folder walk's too; the sample is packed without them."""
    reasons = {name: reason for name in fields if name != primary and (reason := unusable_extra(name)) is not None}
    if not reasons:
        return fields, []
    kept = {name: value for name, value in fields.items() if name not in reasons}
    return kept, [{"reason": reason} for reason in reasons.values()]

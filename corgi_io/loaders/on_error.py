"""What a sample that fails to decode does: ``Decoding(how, on_error="raise")`` (the default) or ``"skip"``.

Every failure is a DecodeError with one line naming the shard, the byte offset and the key:
the decoder's own refusal (``image is 60000x60000 = 3,600,000,000 pixels, above
max_pixels=89,478,485``), a sample of another kind than a built-in decoder's (``sample
'dog/dog_run' is a video; decode='rgb' decodes images: ...``), or whatever else the decoder
raised (``cannot decode (UnidentifiedImageError: cannot identify image file)``).

"raise" stops the iteration at the first failure.  "skip" drops the sample and warns (one
line: the DecodeError's text and how many this worker has skipped this epoch) for each of
the first `WARN_FIRST` failures of a worker's epoch; later ones are counted, and a last
warning at the end of the worker's epoch gives the total.  Skipping needs the dataset's
batches (`Batches(B)` or `Budget(T)`): the batch is yielded without the failed sample (one
sample shorter), so every rank still takes `len(dataset)` steps.  A batch whose every sample fails cannot be yielded:
it raises DecodeError.  A failing `transform` is not a decode failure: it always raises.
"""
from __future__ import annotations

import itertools
import warnings

from corgi_io.errors import DecodeError, plain_message
from corgi_io.loaders.decode import FieldDecoders
from corgi_io.manifest.fields import field_kind
from corgi_io.timing.clock import NULL_CLOCK
from corgi_io.timing.stages import stage_index

DECODE, TRANSFORM, COLLATE = stage_index("decode"), stage_index("transform"), stage_index("collate")

ON_ERROR = ("raise", "skip")
WARN_FIRST = 5  # failures warned one by one in each worker's epoch; the rest are counted
_KIND_WORDS = {"image": ("an image", "images"), "video": ("a video", "videos"), "text": ("text", "text")}


def wrong_kind(sample: dict, decode, field: str | None = None) -> str | None:
    """Why a built-in decoder of one kind (`decode.kind`) refuses `sample` (its non-primary `field`) of another kind;
    None if it does not (a field of no known kind is left to the decoder)."""
    kind, has = getattr(decode, "kind", None), sample["kind"] if field is None else field_kind(field)
    if kind is None or has is None or has == kind:
        return None
    what = f"sample {sample['key']!r}" if field is None else f"field {field!r} of sample {sample['key']!r}"
    return (f"{what} is {_KIND_WORDS[has][0]}; decode={decode.name!r} decodes "
            f"{_KIND_WORDS[kind][1]}: pack with --kind {kind} or use decode='auto'")


class SamplePreparer:
    """Decodes and transforms the samples of one worker's epoch under the `on_error` policy (see the module).

    `locate(sample)` gives a failed sample's (shard URL, shard path, payload byte offset) for the messages
    (`corgi_io.loaders.packs`); `who` names the worker in the warnings (``rank 0 worker 1``); `clock` times
    the decoding and the transform (``decode``, ``transform``).
    """

    def __init__(self, decode, transform, on_error: str, locate, who: str, clock=NULL_CLOCK):
        self.decode, self.transform, self.on_error = decode, transform, on_error
        self.locate, self.who, self.skipped, self.clock = locate, who, 0, clock

    def __call__(self, sample: dict):
        """`sample` with its data decoded and transformed; under "skip", the DecodeError of one that failed."""
        if self.decode is None and self.transform is None:
            return sample
        left = self.clock.switch(DECODE if self.decode is not None else TRANSFORM)
        try:
            return self._prepared(sample)
        finally:
            self.clock.switch(left)

    def _prepared(self, sample: dict):
        if self.decode is not None:
            try:
                if isinstance(self.decode, FieldDecoders):
                    self._decode_fields(sample)
                else:
                    sample["data"] = self._decoded(sample, self.decode)
            except DecodeError as error:
                if self.on_error == "raise":
                    raise
                self._skip(error)
                return error
        if self.transform is not None:
            if self.decode is not None:  # else `__call__` switched to it already
                self.clock.switch(TRANSFORM)
            sample["data"] = self.transform(sample["data"])
            if "fields" in sample and sample["ext"] in sample:
                sample[sample["ext"]] = sample["data"]  # the primary field under its name is `data`
        return sample

    def _decode_fields(self, sample: dict) -> None:
        """decode={field: decoder}: each named field the sample has, decoded in place; the primary one is `data`."""
        for name, decoder in self.decode.decoders:
            if name == sample["ext"]:
                sample["data"] = self._decoded(sample, decoder)
                if name in sample:
                    sample[name] = sample["data"]
            elif name in sample.get("fields", ()):
                sample[name] = self._decoded(sample, decoder, name)
            elif hasattr(decoder, "skip_row"):  # a sample without the field: its row stays its, as for one that fails
                decoder.skip_row()

    def _decoded(self, sample: dict, decode, field: str | None = None):
        """The decoder's value for `data` (or the non-primary `field`); any failure becomes a DecodeError naming
        shard, offset and key."""
        refusal = wrong_kind(sample, decode, field)
        if refusal is None:
            try:
                if field is None:
                    return decode(sample["data"], sample)
                return decode(sample[field], {**sample, "kind": field_kind(field) or sample["kind"]})
            except Exception as exc:
                reason = str(exc) if isinstance(exc, DecodeError) else f"cannot decode ({plain_message(exc)})"
                raise self._error(sample, f"sample {sample['key']!r} ({sample['kind']}): {reason}") from exc
        skip_row = getattr(decode, "skip_row", None)  # a refused sample takes its batch row as a failed one does
        if skip_row is not None:
            skip_row()
        raise self._error(sample, refusal)

    def _error(self, sample: dict, text: str) -> DecodeError:
        """A DecodeError of `sample` saying `text`, after the shard URL and the byte offset of its payload."""
        url, path, offset = self.locate(sample)
        return DecodeError(f"{url}: byte offset {offset}: {text}", shard=path, offset=offset, key=sample["key"])

    def _skip(self, error: DecodeError) -> None:
        self.skipped += 1
        if self.skipped <= WARN_FIRST:
            later = "; later ones are counted, not named" if self.skipped == WARN_FIRST else ""
            warnings.warn(f"{error}: skipped (on_error='skip'; {self.skipped} skipped by {self.who} this epoch"
                          f"{later})", stacklevel=3)

    def finish(self) -> None:
        """At the end of the worker's epoch: the total skipped, when some were not named."""
        if self.skipped > WARN_FIRST:
            warnings.warn(f"{self.who} skipped {self.skipped} samples that failed to decode this epoch "
                          f"(on_error='skip'; the first {WARN_FIRST} named above)", stacklevel=2)


def batch_survivors(batch: list) -> list:
    """The samples of a batch that decoded (a failed one is its DecodeError under "skip"); DecodeError if none did."""
    kept = [sample for sample in batch if not isinstance(sample, DecodeError)]
    if kept:
        return kept
    last = batch[-1]
    raise DecodeError(f"{last}; and every other sample of its batch of {len(batch)} failed to decode: on_error='skip' "
                      "yields a batch without its failed samples, never an empty one", shard=last.shard,
                      offset=last.offset, key=last.key)


def collated_batches(samples, batch_sizes, collate_fn, clock=NULL_CLOCK):
    """`collate_fn` of the survivors (`batch_survivors`) of each batch of a worker's `samples`, batch after batch
    as long as samples come: each batch's size is the next of the iterator `batch_sizes`, read once its first
    sample is out (so a plan that lists the sizes may be made lazily, by the samples' own generator).  Whole
    batches but for the rank's last one, since a worker's share is whole batches (`worker_counts`).  `clock`
    times `collate_fn` (``collate``)."""
    for first in samples:
        batch = [first, *itertools.islice(samples, next(batch_sizes) - 1)]
        left = clock.switch(COLLATE)
        collated = collate_fn(batch_survivors(batch))
        clock.switch(left)
        clock.count(COLLATE, samples=len(batch))
        yield collated

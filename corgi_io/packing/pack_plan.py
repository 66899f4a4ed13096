"""The pack plan, pure: corpus columns and options -> sample order, blocks, shards, and what is left to write.

Nothing here reads or writes a file.  The plan depends only on the walk (file sizes and key
lengths, in walk order) and on `PackOptions`, never on the number of workers or on where the
tasks run, so every executor writes the same bytes.  Resuming is the same plan: its finished
shards are those whose unit record and shard exist (records.load_done).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from corgi_io.arguments import choose
from corgi_io.errors import BadInput, PackError
from corgi_io.manifest import DEFAULT_MAX_PIXELS
from corgi_io.packing import layout
from corgi_io.packing.regular_files import DEFAULT_MAX_SAMPLE_BYTES
from corgi_io.manifest.fields import check_field_name
from corgi_io.packing.sources.forms import FORMS
from corgi_io.packing.sources.values import check_field_mapping
from corgi_io.packing.transforms.chain import checking_options
from corgi_io.packing.transforms import ImageResize, SizeFilter, Tokenize, TransformChain
from corgi_io.packing.transforms.image import renamed_field
from corgi_io.packing.transforms.tokenize import TOKENS_FIELD
from corgi_io.packing.transforms.user_map import UserMap

TEXT_FIELD = "txt"  # the field --tokenizer tokenises

ESTIMATE_CHUNK = 1 << 13  # samples whose record sizes are estimated at a time (bounded temporaries)
NO_PIXEL_LIMIT = 1 << 62  # --max-pixels 0: the resize transform's header check never refuses


@dataclass(frozen=True)
class PackOptions:
    """Everything that decides the bytes of a pack; a resumed pack must match it exactly."""

    format: str = "wds"
    kind: str = "auto"
    order: str = "shuffle"
    seed: int = 0
    block_samples: int = layout.DEFAULT_BLOCK_SAMPLES
    block_bytes: int = layout.DEFAULT_BLOCK_BYTES
    shard_bytes: int = layout.DEFAULT_SHARD_BYTES
    size_fn: str | None = None
    label_index: tuple | None = None
    max_pixels: int | None = DEFAULT_MAX_PIXELS        # an image with more pixels is skipped (None: no limit)
    max_sample_bytes: int = DEFAULT_MAX_SAMPLE_BYTES   # a larger file is skipped, unread
    primary: str | None = None   # the primary field's name; None: the first image field, else video, else text
    require: tuple = ()          # fields every sample must have (one without them is skipped)
    image_max_side: int | None = None   # pack-time preprocessing (docs/format.md): resize larger images
    image_format: str = "keep"          # re-encode resized images (and images of other formats) as jpeg or webp
    image_quality: int = 90             # the JPEG/WebP quality of a resized image
    min_size: int | None = None         # skip a sample whose primary field's final size is outside [min, max]
    max_size: int | None = None
    tokenizer: str | None = None        # a tokenizers JSON file: each sample's txt tokenised into tokens.npy, primary
    drop_text: bool = False             # with tokenizer: leave the txt field out
    map_function: str | None = None     # --map MODULE:FUNCTION: a user's function(fields, key) -> new fields or None
    dedup: bool = False                 # --dedup: leave out a sample whose primary bytes equal an earlier one's
    source_form: str | None = None      # --from: folder, listing, wds, tfrecord, parquet or jsonl; None: detected
    source_fields: tuple = ()           # --features/--columns: (field, feature or column) pairs of a tfrecord/table
    label_field: str | None = None      # --label-field: the WebDataset source field holding the class id (cls)

    def __post_init__(self):
        """Refuse input limits that are not positive ints (max_pixels may be None: no limit), and field names that
        cannot name a field, before any work."""
        try:
            for name in (*(() if self.primary is None else (self.primary,)), *self.require):
                check_field_name(name)
        except BadInput as exc:
            raise PackError(f"{exc} (--primary, --require)") from None
        limits = {"max_sample_bytes": self.max_sample_bytes}
        if self.max_pixels is not None:
            limits["max_pixels"] = self.max_pixels
        for name, value in limits.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PackError(f"{name} must be a positive int, not {value!r}")
        if self.size_fn and self.image_max_side is not None:
            raise PackError("--size-fn sizes the source file, which --image-max-side changes: use one or the other")
        if self.image_format != "keep" and self.image_max_side is None:
            raise PackError("--image-format re-encodes the images that --image-max-side resizes: give it too")
        if self.drop_text and not self.tokenizer:
            raise PackError("--drop-text drops the text that --tokenizer tokenises: give --tokenizer too")
        self.transforms()
        self.size_filter()
        if self.source_form is not None:
            with checking_options("--from"):
                choose("source_form", self.source_form, FORMS)
        if self.source_fields:
            with checking_options("--features/--columns"):
                check_field_mapping("source_fields", dict(self.source_fields), "feature or column name")

    def read_options(self, form: str) -> dict:
        """What the reader of a `form` SOURCE (wds, tfrecord, parquet, jsonl) takes from these options; PackError for
        an option that form cannot use or a mapping it lacks, before any work."""
        unusable = {"--size-fn": self.size_fn, "--labels": self.label_index}
        if form == "wds":
            unusable["--features/--columns"] = self.source_fields
        else:
            unusable["--label-field"] = self.label_field
        for flag, value in unusable.items():
            if value:
                raise PackError(f"{flag} does not apply to a {form} SOURCE (see corgi pack --help)")
        if form == "wds":
            return {"label_field": self.label_field or "cls", "max_member_bytes": self.max_sample_bytes}
        flag, key = ("--features", "features") if form == "tfrecord" else ("--columns", "columns")
        if not self.source_fields:
            raise PackError(f"a {form} SOURCE needs {flag} NAME={key[:-1].upper()},... naming the {key} to pack as "
                            f"fields (and label=..., key=...), e.g. {flag} jpg=image,txt=caption,label=label")
        limits = {"max_cell_bytes": self.max_sample_bytes} if form == "parquet" else {}  # checked before decompressing
        return {key: dict(self.source_fields), **limits}

    def transforms(self) -> TransformChain:
        """The chain of transforms every shard task runs on each sample (empty: none); PackError for bad options.

        The user's --map first (it sees the fields as read), then the image resize, then the tokenizer."""
        steps = [UserMap(self.map_function)] if self.map_function else []
        if self.image_max_side is not None:
            steps.append(ImageResize(self.image_max_side, self.image_format, self.image_quality,
                                     self.max_pixels or NO_PIXEL_LIMIT))
        if self.tokenizer is not None:
            steps.append(Tokenize(self.tokenizer, drop_text=self.drop_text))
        return TransformChain(tuple(steps))

    def primary_after(self) -> str | None:
        """The primary field the transforms make (``tokens.npy`` with a tokenizer), or None: the walk's stays."""
        return TOKENS_FIELD if self.tokenizer is not None else None

    def image_renaming(self) -> str:
        """The --image-format that image fields are renamed for by the transforms ("keep": none is renamed)."""
        return "keep" if self.image_max_side is None else self.image_format

    def renamed(self, name: str) -> str:
        """The name field `name` has after the transforms (an image re-encoded by --image-format is renamed for it)."""
        return renamed_field(name, self.image_renaming())

    def dropped_fields(self) -> tuple:
        """The fields the transforms remove from every sample (the tokenised text with drop_text)."""
        return (TEXT_FIELD,) if self.drop_text else ()

    def size_filter(self) -> SizeFilter | None:
        """The filter on each sample's final primary size, or None without --min-size/--max-size."""
        if self.min_size is None and self.max_size is None:
            return None
        return SizeFilter(self.min_size, self.max_size)


@dataclass(frozen=True, eq=False)
class PackPlan:
    """Which file goes where.  Positions count samples in pack order; shard j holds blocks
    [shard_starts[j], shard_starts[j + 1]) and block i holds positions [block_starts[i], block_starts[i + 1])."""

    order: np.ndarray | None   # int32 (int64 past 2^31 files) per position: its file in walk order; None once staged
    block_starts: np.ndarray   # int64, per block: its first position
    shard_starts: np.ndarray   # int64, per shard: its first block
    suffix: str                # the shard file suffix (".tar", ".tfrecord")
    num_samples: int

    @property
    def num_shards(self) -> int:
        return len(self.shard_starts)

    def shard_name(self, shard: int) -> str:
        return f"shard-{shard:06d}{self.suffix}"

    def shard_blocks(self, shard: int) -> tuple:
        """The first position of each block of `shard`, then the position after its last sample."""
        blocks = np.append(self.shard_starts, len(self.block_starts))[shard:shard + 2]
        starts = np.append(self.block_starts, self.num_samples)
        return tuple(starts[blocks[0]:blocks[1] + 1].tolist())

    def positions(self, shard: int) -> tuple:
        """(first, stop) positions of `shard`."""
        blocks = self.shard_blocks(shard)
        return blocks[0], blocks[-1]

    def staged(self) -> "PackPlan":
        """The plan once its order is in the pack-order table: the same layout without the 8 bytes per file."""
        return replace(self, order=None)


def make_plan(nbytes: np.ndarray, key_bytes: np.ndarray, options: PackOptions, fmt, fields=None) -> PackPlan:
    """Order the samples (seeded permutation, or walk order), then cut blocks and shards from each record's
    estimated size (`fmt.estimate_record_bytes` from payload and key bytes and, given the `fields` masks, the
    number of fields: no file is read).  `nbytes` and `key_bytes` may be any unsigned dtype (the corpus narrows
    them): each chunk is widened to int64 first."""
    count = len(nbytes)
    order = pack_order(count, options)
    estimates = np.empty(count, dtype=np.int64)
    for start in range(0, count, ESTIMATE_CHUNK):
        files = order[start:start + ESTIMATE_CHUNK]
        counts = 1 if fields is None else np.bitwise_count(fields[files]).astype(np.int64)
        estimates[start:start + len(files)] = fmt.estimate_record_bytes(
            nbytes[files].astype(np.int64), key_bytes[files].astype(np.int64), counts)
    cuts = layout.plan_layout(estimates, options.block_bytes, options.block_samples,
                              max(1, options.shard_bytes - len(fmt.TRAILER)))
    return PackPlan(order, cuts.block_starts, cuts.shard_starts, fmt.SUFFIX, count)


def pack_order(count: int, options: PackOptions) -> np.ndarray:
    """The walk index of the file at each position: the seeded permutation of `count`, or walk order.

    int32 while the indices fit (int64 past 2^31 files): 4 B per file less while the plan is made and the table
    written, the driver's peak (issue 30).  The permutation is shuffled in place in its final dtype, never made in
    int64 first; `Generator.shuffle` draws the same swaps whatever the dtype, so it equals ``permutation(count)``.
    """
    order = np.arange(count, dtype=np.int32 if count <= np.iinfo(np.int32).max else np.int64)
    if options.order == "shuffle":
        np.random.default_rng(options.seed).shuffle(order)
    return order

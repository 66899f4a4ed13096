"""The parts a `CorgiPileDataset` is built from: small frozen objects, one job each, each checking its own arguments.

    CorgiPileDataset(Blend({"laion": "s3://...", "cc12m": "/lustre/cc12m"}, weights={"laion": 0.7, "cc12m": 0.3}),
                     shuffle=Shuffle(buffer_blocks=32), ranks=Ranks(balance="size"), batching=Batches(256),
                     decode=Decoding("rgb", on_error="skip"), reading=Reading(threads=8),
                     cache=Cache("/local/cache", 200 << 30))

* what to read: a pack's path or URL, or a `Blend` of several with weights;
* `Shuffle`: how (a `schedule.modes.SHUFFLES` name) and how many blocks one shuffle buffer holds;
* `Ranks`: how the ranks share an epoch (a `schedule.modes.BALANCES` name, `drop_last`, `partitions`, and this
  process's rank and world size when torch.distributed does not say them);
* how to batch, one choice among three: `Batches` (a fixed size), `Budget` (batches of varying size within a
  cost) or `TokenRows` (rows of exactly L tokens); None yields samples;
* `Decoding`: what a sample's bytes become, the pixel bound, and what a failure does;
* `Reading`: reads in flight, read-ahead, the checks, the storage's options;
* `Cache`: where remote pieces are kept, how many bytes, which eviction.

Each object refuses a bad argument of its own when it is made (an `ArgumentError` naming it).  What can only be
checked across objects (a balance that needs batches, token rows that take no transform...) is checked in one
place, `loaders/loader_spec.py:loader_spec`, which resolves them into the dataset's `LoaderSpec`.
"""
from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

from corgi_io.arguments import check_at_least, check_callable, check_flag, check_mapping, choose
from corgi_io.errors import ArgumentError
from corgi_io.schedule import BALANCES, BATCH_COSTS, SHUFFLES
from corgi_io.schedule.blend import check_weights
from corgi_io.schedule.eviction import EVICTIONS
from corgi_io.schedule.token_rows import RowOptions
from corgi_io.timing import TIMINGS

from corgi_io.loaders.collate import collate_samples
from corgi_io.loaders.decode import DEFAULT_MAX_PIXELS, get_decoder
from corgi_io.loaders.on_error import ON_ERROR


def _set(obj, name: str, value) -> None:
    """Store a checked, normalised value on a frozen object (in its `__post_init__`)."""
    object.__setattr__(obj, name, value)


class FrozenMap(Mapping):
    """A read-only copy of a part's mapping (`Blend.sources`, `Ranks.partitions`, `Reading.storage_options`), so
    a part cannot change once checked, not even through the dict it was given; it pickles (spawn workers) and
    hashes like the part.  Nested values are copied (`copy.deepcopy`), lists made tuples."""

    def __init__(self, mapping: Mapping):
        self._items = {key: tuple(v) if isinstance(v, list) else copy.deepcopy(v) for key, v in mapping.items()}

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(repr(sorted(self._items.items(), key=repr)))

    def __repr__(self) -> str:
        return repr(self._items)


@dataclass(frozen=True)
class Blend:
    """Several packs read as one, each giving its weight's share of every epoch.

    `sources`: {name: pack path or URL}.  `weights`: {name: weight} or a list in the sources' order (default:
    each pack's samples).  `samples_per_epoch`: an int, a source's name for one pass over it, or by default all
    the sources' samples.  A source too small for its share is repeated (a fresh order each pass); one too large
    continues next epoch where this one stopped (`corgi_io.schedule.blend_plan`, docs/algorithms.md).
    """

    sources: Mapping
    weights: object = None
    samples_per_epoch: object = None

    def __post_init__(self):
        if not isinstance(self.sources, Mapping) or not self.sources:
            raise ArgumentError(f"Blend(sources=) must be a non-empty mapping {{name: pack}}, got {self.sources!r}")
        _set(self, "sources", FrozenMap(self.sources))
        names = [str(name) for name in self.sources]
        paths = [path for path in self.sources.values() if not isinstance(path, (str, os.PathLike))]
        if paths or len(set(names)) < len(names):
            raise ArgumentError(f"Blend(sources=) maps distinct names to pack paths or URLs, got {dict(self.sources)!r}")
        if self.weights is not None:
            check_weights(names, self.weights)
            _set(self, "weights", FrozenMap(self.weights) if isinstance(self.weights, Mapping) else tuple(self.weights))
        if isinstance(self.samples_per_epoch, str) and self.samples_per_epoch not in names:
            raise ArgumentError(f"samples_per_epoch={self.samples_per_epoch!r} names no source of {names}")
        if not isinstance(self.samples_per_epoch, str):
            check_at_least("samples_per_epoch", self.samples_per_epoch, 1, optional=True)


@dataclass(frozen=True)
class Shuffle:
    """How an epoch is shuffled: `mode` "corgipile" (block order, then a buffer of `buffer_blocks` blocks
    shuffled), "block" (block order only), "window" (the webdataset/tf.data baseline: a sliding buffer of as many
    samples as `buffer_blocks` blocks, over the stored order), "none" (stored order) or "full" (one read per
    sample).  `buffer_blocks` bounds the memory of a worker's buffer."""

    mode: str = "corgipile"
    buffer_blocks: int = 16

    def __post_init__(self):
        choose("shuffle mode", self.mode, SHUFFLES)
        _set(self, "buffer_blocks", check_at_least("buffer_blocks", self.buffer_blocks, 1, optional=False))


@dataclass(frozen=True)
class Ranks:
    """How the ranks share an epoch: each gets the same number of samples (and steps).

    `balance`: "count" (equal samples), "size" (equal samples and size sums, every step's batch balanced) or
    "dynamic" (size budgets proportional to each rank's measured speed: report steps with `observe`).
    `drop_last`: cut every rank to the smallest share (and drop a partial last batch) instead of repeating a
    rank's own samples.  `partitions`: {rank: shard paths} pins a pack's shards to ranks (node-local data).
    `rank`, `world_size`: this process's, when torch.distributed is not initialised (else both from it).
    """

    balance: str = "count"
    drop_last: bool = False
    partitions: Mapping | None = None
    rank: int | None = None
    world_size: int | None = None

    def __post_init__(self):
        choose("balance", self.balance, BALANCES)
        _set(self, "drop_last", check_flag("drop_last", self.drop_last))
        if self.partitions is not None:
            _set(self, "partitions", FrozenMap(check_mapping("partitions", self.partitions)))
        _set(self, "rank", check_at_least("rank", self.rank, 0, optional=True))
        _set(self, "world_size", check_at_least("world_size", self.world_size, 1, optional=True))
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise ArgumentError(f"rank={self.rank} is outside world_size={self.world_size} "
                                f"(ranks 0 to {self.world_size - 1})")


@dataclass(frozen=True)
class Batches:
    """Batches of `size` samples, each `collate_fn(samples)`; with `group_by_size`, each CorgiPile buffer is
    sorted by size and cut, and the batches shuffled (length grouping: padded models pad little)."""

    size: int
    collate_fn: object = collate_samples
    group_by_size: bool = False

    def __post_init__(self):
        _set(self, "size", check_at_least("batch size", self.size, 1, optional=False))
        check_callable("collate_fn", self.collate_fn)
        _set(self, "group_by_size", check_flag("group_by_size", self.group_by_size))


@dataclass(frozen=True)
class Budget:
    """Batches of varying size whose cost stays within `limit` (tokens, frames, pixels: the manifest's size):
    `cost` "padded" (``n * max(size)``, size-sorted batches) or "sum" (for varlen or packed models).  A sample
    above the limit is a batch of its own (`corgi_io.schedule.budget_plan`)."""

    limit: int
    cost: str = "padded"
    collate_fn: object = collate_samples

    def __post_init__(self):
        _set(self, "limit", check_at_least("budget limit", self.limit, 1, optional=False))
        choose("budget cost", self.cost, BATCH_COSTS)
        check_callable("collate_fn", self.collate_fn)


@dataclass(frozen=True)
class TokenRows:
    """Sequence packing: rows of exactly `length` tokens from a pack of token ids (``corgi pack --tokenizer``),
    the documents concatenated in CorgiPile order, `eos_id` (if given) after each, `batch_size` rows per item
    (None: one row per item).  With `split_documents=False` a document that does not fit starts a new row, the
    rest padded with `pad_id` (`corgi_io.loaders.token_rows`)."""

    length: int
    batch_size: int | None = None
    eos_id: int | None = None
    split_documents: bool = True
    pad_id: int = 0

    def __post_init__(self):
        _set(self, "length", check_at_least("row length", self.length, 1, optional=False))
        _set(self, "batch_size", check_at_least("batch_size", self.batch_size, 1, optional=True))
        _set(self, "eos_id", check_at_least("eos_id", self.eos_id, 0, optional=True))
        _set(self, "split_documents", check_flag("split_documents", self.split_documents))
        _set(self, "pad_id", check_at_least("pad_id", self.pad_id, 0, optional=False))

    @property
    def options(self) -> RowOptions:
        """What the pure row planner (`corgi_io.schedule.token_rows`) needs of these options."""
        return RowOptions(self.length, self.eos_id is not None, self.split_documents)

    def identity(self) -> dict:
        """What a resume state must agree on, besides the loader's other options."""
        return {"pack_length": self.length, "eos_id": self.eos_id, "split_documents": self.split_documents}


BATCHINGS = (Batches, Budget, TokenRows)


@dataclass(frozen=True)
class Decoding:
    """What a sample's bytes become: `how` None (bytes), "pil", "rgb", "text", "tokens", "video" (8-frame clips),
    "auto" (by each sample's kind), a callable(data, sample) such as `VideoDecoder(frames=16)` or
    `ImageDecoder(...)`, or {field: any of those}.  Images (clips: frames x H x W) above `max_pixels` (Pillow's
    limit by default; None: no bound beyond Pillow's) are refused before decoding.  `on_error` "raise" (a
    DecodeError naming shard, offset and key) or "skip" (drop the sample with a warning; needs batches)."""

    how: object = None
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    on_error: str = "raise"

    def __post_init__(self):
        _set(self, "max_pixels", check_at_least("max_pixels", self.max_pixels, 1, optional=True))
        choose("on_error", self.on_error, ON_ERROR)
        get_decoder(self.how, self.max_pixels)  # an unknown name or a bad {field: how} is refused here

    @property
    def on_device(self) -> bool:
        """Whether `how` decodes whole batches in the training process (`ImageDecoder(device=...)`)."""
        return bool(getattr(self.how, "on_device", False))


@dataclass(frozen=True)
class Reading:
    """How pieces are read: `threads` reads in flight (None: the storage's own, 2 local, remote 1 grown to 8),
    `prefetch_blocks` pieces read ahead of the buffer (None: as many as the buffer holds), `verify` each shard's
    size and every record's checksum before a byte is yielded, and `storage_options` for the storage (fsspec's,
    or HTTP headers and timeouts).  `timing`: what the dataset's `stats` keeps of where the time goes, one of
    `corgi_io.timing.TIMINGS` ("off" by default: "stages" costs 2-8% of samples/s on raw bytes, docs/benchmarks.md; "trace" adds a timeline).  `fields`: a tuple of field
    names (extensions, ``("txt", "json")``) to read only those fields' bytes, each checked alone, the plan
    unchanged (`corgi_io.reading.field_reads`; packs of manifest version 6 on, checked when the dataset is made);
    None (the default) reads every field."""

    threads: int | None = None
    prefetch_blocks: int | None = None
    verify: bool = True
    storage_options: Mapping = field(default_factory=dict)
    timing: str = "off"
    fields: tuple | None = None

    def __post_init__(self):
        _set(self, "threads", check_at_least("threads", self.threads, 1, optional=True))
        _set(self, "prefetch_blocks", check_at_least("prefetch_blocks", self.prefetch_blocks, 0, optional=True))
        _set(self, "verify", check_flag("verify", self.verify))
        _set(self, "storage_options", FrozenMap(check_mapping("storage_options", self.storage_options)))
        choose("timing", self.timing, TIMINGS)
        if self.fields is not None:
            _set(self, "fields", field_names(self.fields))


def field_names(fields) -> tuple:
    """`fields` as a tuple of distinct, non-empty field names; ArgumentError for anything else (a lone string too:
    ``fields="txt"`` would be three fields)."""
    names = tuple(fields) if isinstance(fields, (tuple, list)) else None
    if not names or not all(isinstance(name, str) and name for name in names) or len(set(names)) < len(names):
        raise ArgumentError(f"Reading(fields=) takes a non-empty tuple of distinct field names (extensions, e.g. "
                            f"('txt', 'json')), or None for every field; got {fields!r}")
    return names


@dataclass(frozen=True)
class Cache:
    """Remote pieces kept on local disk under `folder`, at most `limit` bytes, shared safely by a node's
    processes and checked when written and read back; `policy` "belady" (evict the piece whose next use in the
    known future is furthest) or "lru" (`corgi_io.loaders.piece_cache`).  Local packs are never cached.

    Without a `limit`, half the free space of the folder's file system now, at most `DEFAULT_CACHE_CAP` bytes,
    said in one warning naming the folder and the limit (DataLoader workers inherit the number, unsaid)."""

    folder: object
    limit: int | None = None
    policy: str = "belady"

    def __post_init__(self):
        if not isinstance(self.folder, (str, os.PathLike)):
            raise ArgumentError(f"Cache folder must be a path, got {self.folder!r}")
        _set(self, "folder", os.fspath(self.folder))
        _set(self, "limit", check_at_least("Cache limit (bytes)", self.limit, 1, optional=True))
        if self.limit is None:
            _set(self, "limit", default_cache_limit(self.folder))
            warnings.warn(f"Cache({self.folder!r}) has no limit: it keeps at most {self.limit} bytes "
                          f"({self.limit / 2**30:.1f} GiB: half the free space of its file system, at most "
                          f"{DEFAULT_CACHE_CAP >> 40} TiB); give Cache(folder, limit) to choose", stacklevel=3)
        choose("cache policy", self.policy, EVICTIONS)


DEFAULT_CACHE_CAP = 1 << 40  # bytes: a `Cache` without a limit takes half the free space, at most this


def default_cache_limit(folder: str) -> int:
    """Half the free space of the file system that holds `folder` (or its nearest existing parent), at most
    `DEFAULT_CACHE_CAP`, and at least 1 byte."""
    where = os.path.abspath(folder)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        disk = os.statvfs(where)
    except OSError as exc:
        raise ArgumentError(f"Cache folder {folder!r}: cannot find its free space for a default limit "
                            f"({exc.strerror or exc}); give Cache(folder, limit)") from None
    return max(1, min(disk.f_bavail * disk.f_frsize // 2, DEFAULT_CACHE_CAP))

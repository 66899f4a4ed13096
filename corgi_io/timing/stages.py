"""The stages a loader's time is split into: one registry, in board order.

Each stage runs on one *side*:

* ``read``: a worker's reading threads, several at once (`Reading(threads)`): their times add up thread time,
  which can exceed the worker's wall time;
* ``worker``: the worker's one consumer thread (the DataLoader worker process, or the training process with
  ``num_workers=0``): its stages partition that thread's wall time, so they add up to it;
* ``trainer``: the training process, around the loader (`PipelineStats.watch`).

``read_wait`` (the consumer waiting for the read-ahead) is where the read side shows on the worker's critical
path: a summary shares it out among the read stages in proportion to their thread time (`timing.summary`).
``first_byte`` is nested in ``storage`` / ``cache_miss`` (the part of their time before the first byte came,
where the storage can tell: HTTP), never added to them.
"""
from __future__ import annotations

from typing import NamedTuple


class Stage(NamedTuple):
    """One stage: its `name` (the key in every report), the `side` it runs on, and what its time measures."""

    name: str
    side: str
    what: str


STAGES = (
    Stage("storage", "read", "reads from the pack's storage (no cache): waiting for and receiving the bytes"),
    Stage("first_byte", "read", "of storage and cache_miss: the wait for the first byte (HTTP; nested, not added)"),
    Stage("cache_hit", "read", "pieces read back from the local cache and checked"),
    Stage("cache_miss", "read", "pieces the cache did not hold, fetched from storage"),
    Stage("verify", "read", "checksums and shard sizes checked before a sample is yielded"),
    Stage("split", "read", "pieces cut into samples (or rows of samples)"),
    Stage("read_wait", "worker", "the consumer waiting for the read-ahead, or on storage itself (a remote "
                                 "manifest's rows while it plans): the read side on the critical path"),
    Stage("order", "worker", "samples held and put in the shuffle buffer's order"),
    Stage("decode", "worker", "payload bytes decoded (images, video, text, tokens)"),
    Stage("transform", "worker", "the user's transform"),
    Stage("collate", "worker", "samples gathered into batches"),
    Stage("handoff", "worker", "transfer to the trainer: from yielding an item until asked for the next "
                               "(the queue put, and waiting while the trainer's prefetch is full)"),
    Stage("to_device", "trainer", "the copy to the accelerator, when to_device's copy is waited on"),
    Stage("startup", "trainer", "the wait for each pass's first batch: worker start-up, planning, first reads"),
    Stage("stall", "trainer", "data stall: the training loop waiting for its next batch, after the first"),
    Stage("windup", "trainer", "the wait after a pass's last batch for the loader's end (workers shutting down)"),
    Stage("step", "trainer", "the training loop's own time between batches (not a loader stage)"),
)
TIMINGS = {  # Reading(timing=): what a dataset's `stats` keeps
    "off": "nothing (the default: timing costs 2-8% of samples/s on raw bytes, docs/benchmarks.md)",
    "stages": "per-stage totals per worker and rank",
    "trace": "the totals and each slot's latest intervals, for a timeline (corgi profile --plot)",
}
FIELDS = ("seconds", "bytes", "samples", "calls")  # what the board counts per stage
NESTED = frozenset({"first_byte"})  # stages whose time is part of another's


def stage_index(name: str) -> int:
    """The board column of stage `name` (KeyError names the known ones)."""
    try:
        return _INDEX[name]
    except KeyError:
        raise KeyError(f"no stage {name!r}; the stages are {[s.name for s in STAGES]}") from None


def names(side: str | None = None) -> list:
    """The stages' names, of one `side` or all, in board order."""
    return [s.name for s in STAGES if side is None or s.side == side]


_INDEX = {stage.name: i for i, stage in enumerate(STAGES)}

"""One DataLoader worker's pass over its share of an epoch: the plan read, and its items made, in one of four forms.

`worker_items(dataset)` picks the form from the dataset's batching (`LoaderSpec`):

* rows of tokens (`TokenRows`): `loaders.token_rows`, counted in rows for resume;
* fast batches (raw bytes, the default collate, one field per sample): built from the read pieces with numpy,
  no dict per sample (`loaders.fast_batches`);
* collated batches (`Batches`, or `Budget`, whose plan gives each batch's size as it is made): samples
  prepared one by one, then `collated_batches`;
* samples.

Every form starts the same way (`_start`): the reader of the epoch's planner, the worker's buffer plan from
where it stands (a loaded resume state), through the remote cache when there is one; and every item yielded
moves the dataset's `resume_point` on.  The worker's clock (`dataset.stats`) times every stage of the pass
(`corgi_io.timing`): the time between yielding an item and being asked for the next is ``handoff``.
"""
from __future__ import annotations

import collections
import itertools
from time import perf_counter

import torch

from corgi_io.loaders.decode import epoch_decoder
from corgi_io.loaders.distributed import worker_and_count
from corgi_io.loaders.fast_batches import row_batch, shared_buffer
from corgi_io.loaders.image_decoder import batch_slots
from corgi_io.loaders.on_error import SamplePreparer, collated_batches
from corgi_io.loaders.piece_cache import cached_epoch
from corgi_io.loaders.token_rows import row_items
from corgi_io.storage.base import waited_seconds
from corgi_io.timing.clock import HANDOFF, NullClock


def worker_items(ds):
    """This worker's items of `ds`'s current epoch (a `CorgiPileDataset` whose `__iter__` took the epoch), timed on
    this process's clock."""
    clock = ds.stats.worker_clock()
    items = _items(ds, clock)
    return items if isinstance(clock, NullClock) else _handed_over(items, clock)


def _items(ds, clock):
    """The pass's items in the form its batching asks for (see the module)."""
    spec = ds.spec
    if spec.rows is not None:
        return _rows(ds, clock)
    if ds.fast_batches:
        return _fast_batches(ds, clock)
    if spec.batch_budget is not None:  # the plan lists one batch per item: their sizes, as it is made
        sizes = collections.deque()
        return collated_batches(_samples(ds, clock, sizes), iter(sizes.popleft, None), spec.collate_fn, clock)
    if spec.batch_size is not None:  # an ImageDecoder's images go straight into their batch (`BatchSlots`)
        return collated_batches(_samples(ds, clock, slots=spec.batch_size), itertools.repeat(spec.batch_size),
                                spec.collate_fn, clock)
    return _samples(ds, clock)


def _handed_over(items, clock):
    """`items`, the time from yielding each to being asked for the next counted as ``handoff`` (`StageClock.
    handed_over`: two `perf_counter` calls an item, no switch); everything reaches the board when the pass ends
    (or is closed, as a loop that stops early closes it).  This generator frame is most of what timing costs a raw
    sample in one process (0.3 of 0.75 µs, docs/benchmarks.md "Stage timing cost")."""
    clock.restart()
    trace = getattr(clock, "trace", None)  # timing="trace": each hand-over is an interval of the timeline too
    try:
        for item in items:
            before = perf_counter()
            yield item
            after = perf_counter()
            clock.handed_over += after - before
            clock.items += 1
            if trace is not None:
                trace.add(HANDOFF, before, after)
    finally:
        items.close()  # the reads still in flight end (and are timed) before the last flush
        clock.close()


def _start(ds, clock, batch_sizes=None):
    """(reader, plan, worker) of this worker's pass (`_planned`), the time it waited on storage meanwhile (a remote
    manifest's rows, fetched while planning) timed as such, not as ``order``."""
    waited = waited_seconds()
    try:
        return _planned(ds, clock, batch_sizes)
    finally:
        clock.waited_on_storage(waited_seconds() - waited)


def _planned(ds, clock, batch_sizes=None):
    """(reader, plan, worker) of this worker's pass; given a deque `batch_sizes`, the sizes of the plan's items
    (budgeted batches: a planner that counts items gives its plan whole) are added there."""
    worker, num_workers = worker_and_count()
    planner = ds.planner
    ds.packs.expect(planner, ds.rank, worker, num_workers)
    reader = ds.last_reader = ds.packs.reader(planner, clock)
    plan = ds.resume_point.start(planner, ds.rank, worker, num_workers)
    if batch_sizes is not None:
        batch_sizes.extend(len(order) for _, order in plan)
    readers = ds.packs.piece_readers(reader)
    if any(r.cache is not None for r in readers):  # the next epoch's plan is the rest of the known future
        upcoming = ds.packs.planner(ds.world_size, ds.epoch + 1, ds.cost_model)
        plan = cached_epoch(readers, plan, ds.packs.local(planner), upcoming.plan(ds.rank, worker, num_workers),
                            ds.packs.local(upcoming), ds.spec.prefetch_blocks)
    return reader, plan, worker


def _samples(ds, clock, batch_sizes=None, slots=None):
    """The worker's samples, in the plan's order: read, decoded and transformed (`slots`: the fixed batch size
    whose batches an ImageDecoder fills in place)."""
    reader, plan, worker = _start(ds, clock, batch_sizes)
    decode = epoch_decoder(ds.decode, ds.spec.seed, ds.epoch)  # clips and crops follow (seed, epoch, index)
    if slots is not None:
        decode = batch_slots(decode, slots)
    prepare = SamplePreparer(decode, ds.spec.transform, ds.spec.on_error, ds.packs.locate,
                             f"rank {ds.rank} worker {worker}", clock)
    for sample in reader.samples(plan):
        ds.resume_point.yielded += 1
        yield prepare(sample)  # under on_error="skip", a failed sample is its DecodeError (collated_batches)
    prepare.finish()


def _fast_batches(ds, clock):
    """The worker's batches, the same as `collated_batches` of `_samples`, built from the read pieces with numpy."""
    reader, plan, _ = _start(ds, clock)  # in a DataLoader worker, batches cross to the main process in shared memory
    allocate = shared_buffer if torch.utils.data.get_worker_info() is not None else None
    images = epoch_decoder(ds.decode, ds.spec.seed, ds.epoch)  # None, or an ImageDecoder on a device
    for rows in reader.batches(plan, ds.spec.batch_size, allocate):
        ds.resume_point.yielded += len(rows.offsets) - 1
        yield row_batch(rows, images)


def _rows(ds, clock):
    """The worker's rows of tokens, or batches of rows, counted in rows for resume."""
    reader, ranges, _ = _start(ds, clock)  # a row planner's plan is the worker's row ranges
    for item in row_items(reader, ds.planner.streams[ds.rank], ranges, ds.spec.rows, ds.spec.batch_size):
        ds.resume_point.yielded += len(item["input_ids"]) if ds.spec.batch_size else 1
        yield item

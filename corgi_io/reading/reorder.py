"""Order stage: hold split samples until the plan lists them, then yield them in the plan's order.

Input: ``(first id, sample dicts)`` per piece read (a piece is a run of ids: a pack's sample ids, or a
blend's virtual ids) and `Marker(order)` steps that end a buffer.
At a marker the stage yields the samples whose ids `order` lists, in that order.  A listed
sample may have been read for an earlier buffer (window mode, carried batch remainders), so
read-but-unlisted samples stay resident, keyed by id, until listed.  A sample read twice
(padding can repeat a piece on a worker) is listed twice and yielded as two distinct dicts.
"""
from __future__ import annotations

from operator import itemgetter

from corgi_io.reading.read_ahead import Marker

_data = itemgetter("data")


def buffer_order(steps, residency):
    """Yield the samples of `steps` ((first id, sample list) per piece, and Marker(order) buffer ends) in each
    buffer's order.

    `residency` is told of the payload bytes that leave: repeats dropped on arrival, and each
    buffer's yielded samples once the buffer is done (`release_all` when nothing stays resident,
    which spares a pass over the samples).
    """
    resident: dict = {}   # sample id -> dict, read but not yet yielded
    repeats: dict = {}    # sample id -> extra listings still to yield as copies
    for step in steps:
        if not isinstance(step, Marker):
            _hold(step, resident, repeats, residency)
            continue
        order = step.value.tolist()
        if repeats:
            yield from _yield_with_repeats(order, resident, repeats, residency)
            continue
        out = list(map(resident.pop, order))   # C speed; a missing id is a broken plan (KeyError)
        if not resident:
            yield from _handed_over(out)
            residency.release_all()
            continue
        freed = sum(map(len, map(_data, out)))  # samples stay for later buffers (window mode, carried batches)
        yield from _handed_over(out)
        residency.release(freed)


def _handed_over(samples: list):
    """Yield a buffer's samples in order, each dropped from the list as it goes: the consumer decodes into the
    sample's dict, and the list would otherwise keep every decoded sample of the buffer alive until its end."""
    samples.reverse()
    while samples:
        yield samples.pop()


def _hold(piece: tuple, resident: dict, repeats: dict, residency) -> None:
    first, samples = piece
    ids = range(first, first + len(samples))   # a piece is a run of ids
    if resident.keys().isdisjoint(ids):
        resident.update(zip(ids, samples))
        return
    for index, sample in zip(ids, samples):   # a piece read again: its samples are yielded as copies of the first
        if index in resident:
            repeats[index] = repeats.get(index, 0) + 1
            residency.release(len(sample["data"]))
        else:
            resident[index] = sample


def _yield_with_repeats(order: list, resident: dict, repeats: dict, residency):
    for index in order:
        if repeats.get(index):
            repeats[index] -= 1
            if not repeats[index]:
                del repeats[index]
            yield dict(resident[index])
            continue
        sample = resident.pop(index)
        residency.release(len(sample["data"]))
        yield sample

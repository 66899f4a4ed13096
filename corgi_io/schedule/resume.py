"""Mid-epoch and elastic resume as pure functions over numpy arrays: no I/O, no torch.

An epoch is planned in *segments*.  Segment 0 is the ordinary plan for the world
(W0 ranks x K0 workers).  When training stops mid-epoch, every worker of every rank has
yielded some prefix of its own yield order; ranks advance in lockstep, so worker w has
yielded the same count `yielded[w]` on every rank, and the state saved by any one rank
says what the whole world consumed.

* Same world, same workers: each worker resumes its own plan after its first `yielded[w]`
  samples (`skip_consumed`), so the resumed run yields exactly the batches the uninterrupted
  run would have yielded.
* Another world size or worker count: the samples no worker yielded form the *remainder*
  (`remainder_pieces`): the epoch's pieces, in their read order, minus the consumed samples.
  Untouched blocks stay whole pieces; a partially consumed block becomes the runs of its
  unconsumed samples.  The next segment assigns the remainder to the new world as if each
  run were a block (equal counts per rank, the usual padding rule), so it is still read by
  ranged reads of runs, never sample by sample.  A later interruption adds a segment.

`resumed_plan` gives one worker its plan from a merged state, over the epoch's `SamplePlanner`
(`remaining_pieces`: what the finished segments left; `segment_consumed`: what one of them yielded).

The state of a worker is small JSON: the pack's fingerprint, the options that decide the
order, the epoch, the finished segments `[(W, K, yielded per worker)]` and the current one.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from corgi_io.errors import ResumeError

from corgi_io.schedule.pieces import piece_samples
from corgi_io.schedule.planner import SamplePlanner

STATE_KEY = "corgi_io_resume"   # marks a CorgiPileDataset worker state inside a StatefulDataLoader state
STATE_VERSION = 1


def pack_fingerprint(format_name: str, checksum: str, options: dict, shards) -> str:
    """A digest of what identifies a pack's samples: format, checksum, packing options, shard paths and sizes."""
    text = json.dumps([format_name, checksum, options, [(s.path, s.bytes, s.samples) for s in shards]],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def skip_consumed(plan: list, yielded: int) -> list:
    """The buffer plan `[(pieces, order)]` of a worker that already yielded its first `yielded` samples.

    The result yields exactly `concat(orders)[yielded:]`.  Buffers wholly consumed are not read,
    except the pieces holding a sample that a later order still lists (window mode and carried
    batch remainders list samples read for earlier buffers); those are read with the first
    remaining buffer.  O(samples of the plan).
    """
    sizes = np.array([len(order) for _, order in plan], dtype=np.int64)
    ends = np.cumsum(sizes)
    cut = int(np.searchsorted(ends, yielded, side="right"))  # first buffer not wholly consumed
    if cut == len(plan):
        return []
    within = yielded - (int(ends[cut - 1]) if cut else 0)
    rest = [(plan[cut][0], plan[cut][1][within:])] + list(plan[cut + 1:])
    still_listed = np.sort(np.concatenate([order for _, order in rest]))
    carried = [pieces[_holds_any(pieces, still_listed)] for pieces, _ in plan[:cut]]
    first_pieces = np.concatenate(carried + [rest[0][0]]) if carried else rest[0][0]
    return [(first_pieces, rest[0][1])] + rest[1:]


def _holds_any(pieces: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per piece, whether any of the sorted `ids` lies in its [start, stop) range."""
    return np.searchsorted(ids, pieces[:, 2], side="left") > np.searchsorted(ids, pieces[:, 1], side="left")


def consumed_samples(num_samples: int, orders_of, world_size: int, yielded, by_items: bool = False) -> np.ndarray:
    """Bool mask of the samples a world of `world_size` ranks yielded when worker w of each had yielded `yielded[w]`
    samples, or, `by_items`, `yielded[w]` whole items of its plan (budgeted batches: ranks step alike in batches,
    not in samples).

    `orders_of(rank, worker)` gives that worker's yield orders (arrays of sample ids) in turn.
    O(samples consumed) plus the planning `orders_of` does.
    """
    consumed = np.zeros(num_samples, dtype=bool)
    for rank in range(world_size):
        for worker, count in enumerate(yielded):
            taken = 0
            for order in orders_of(rank, worker):
                if taken >= count:
                    break
                head = order if by_items else order[:count - taken]
                consumed[head] = True
                taken += 1 if by_items else len(head)
    return consumed


def remainder_pieces(sequence: np.ndarray, consumed: np.ndarray) -> np.ndarray:
    """The runs of `sequence`'s pieces (rows (block, start, stop), in read order) whose samples are not consumed.

    A piece with no consumed sample stays whole; others split into the runs of their
    unconsumed samples.  Each sample appears in as many runs as it appears in `sequence`
    (padding repeats none: `sequence` is the epoch's sequence of distinct samples).
    """
    sequence = np.asarray(sequence, dtype=np.int64).reshape(-1, 3)
    ids = piece_samples(sequence)
    owner = np.repeat(np.arange(len(sequence)), sequence[:, 2] - sequence[:, 1])
    keep = ~consumed[ids]
    ids, owner = ids[keep], owner[keep]
    if len(ids) == 0:
        return np.zeros((0, 3), dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], (owner[1:] != owner[:-1]) | (ids[1:] != ids[:-1] + 1))))
    stops = np.append(starts[1:], len(ids))
    return np.stack([sequence[owner[starts], 0], ids[starts], ids[stops - 1] + 1], axis=1)


def segment_consumed(planner: SamplePlanner, segment: dict, runs: np.ndarray | None) -> np.ndarray:
    """Bool mask of the samples that the world of a finished `segment` ({world_size, num_workers, yielded})
    yielded of `planner`'s epoch, that world having planned `runs` (None: the whole epoch)."""
    world, workers = planner.for_world(segment["world_size"], runs), segment["num_workers"]

    def orders_of(rank: int, worker: int):
        return (order for _, order in world.plan(rank, worker, workers))

    return consumed_samples(planner.table.num_samples, orders_of, segment["world_size"], segment["yielded"],
                            planner.counts_items)


def remaining_pieces(planner: SamplePlanner, finished: list) -> np.ndarray | None:
    """The runs of `planner`'s epoch that no rank yielded in the `finished` segments, in the epoch's read order
    (None when no segment finished: the epoch is whole).  Each segment planned what the ones before it left."""
    if not finished:
        return None
    sequence, runs = planner.sequence(), None
    for segment in finished:
        sequence = runs = remainder_pieces(sequence, segment_consumed(planner, segment, runs))
    return runs


def resumed_plan(planner: SamplePlanner, rank: int, worker: int, num_workers: int, resume: dict) -> tuple:
    """(buffer plan, finished segments, units already yielded) of one worker of `planner`'s world resuming
    `resume` (`merge_states`, of the planner's epoch).  Units are samples, or a planner's plan items when it
    `counts_items` (budgeted batches).

    The same world and worker count continue each worker's own plan after its `yielded` units
    (`skip_consumed`); another one finishes the interrupted segment and plans the samples no rank
    yielded over the new world, which needs every worker's progress (ResumeError otherwise).
    """
    finished, yielded = resume["finished"], resume["yielded"]
    same_world = (planner.spec.world_size, num_workers) == (resume["world_size"], resume["num_workers"])
    if same_world and worker in yielded:
        segment = planner.for_world(planner.spec.world_size, remaining_pieces(planner, finished))
        plan, done = list(segment.plan(rank, worker, num_workers)), yielded[worker]
        samples = sum(len(order) for _, order in plan[:done]) if planner.counts_items else done
        return skip_consumed(plan, samples), finished, done
    finished = closed_segments(resume)
    plan = planner.for_world(planner.spec.world_size, remaining_pieces(planner, finished))
    return plan.plan(rank, worker, num_workers), finished, 0


def closed_segments(resume: dict) -> list:
    """The finished segments of the saved point `resume` (`merge_states`) and its interrupted one, closed: what
    another world size or worker count continues from (the samples' planners and the rows' alike).  It needs
    every worker's progress: ResumeError for a state that lacks some."""
    yielded, workers = resume["yielded"], resume["num_workers"]
    if len(yielded) != workers:
        raise ResumeError(f"the state holds {len(yielded)} of {workers} workers' progress; resuming with another "
                          "world size or worker count needs the whole StatefulDataLoader state of one rank")
    return resume["finished"] + [{"world_size": resume["world_size"], "num_workers": workers,
                                  "yielded": [yielded[w] for w in range(workers)]}]


def worker_state(identity: dict, epoch: int, finished: list, world_size: int, num_workers: int,
                 worker: int, yielded: int) -> dict:
    """The JSON-serialisable state of one worker: what it must agree on, and how far it got."""
    return {STATE_KEY: STATE_VERSION, **identity, "epoch": int(epoch), "finished_segments": finished,
            "segment": {"world_size": world_size, "num_workers": num_workers, "worker": worker,
                        "yielded": int(yielded)}}


def find_states(saved) -> list:
    """Every worker state inside `saved`: one worker's state, or a whole StatefulDataLoader state."""
    if isinstance(saved, dict):
        if STATE_KEY in saved:
            return [saved]
        return [state for value in saved.values() for state in find_states(value)]
    if isinstance(saved, (list, tuple)):
        return [state for value in saved for state in find_states(value)]
    return []


def merge_states(states: list, identity: dict) -> dict:
    """One resume point from the worker states of one rank: {epoch, finished, world_size, num_workers, yielded}.

    `yielded` maps worker -> samples yielded.  Raises ResumeError when there is no state, when it
    belongs to another pack or other order-deciding options, or when the workers disagree.
    """
    if not states:
        raise ResumeError("no CorgiPileDataset state in what was given to load_state_dict")
    first = states[0]
    if first.get(STATE_KEY) != STATE_VERSION:
        raise ResumeError(f"resume state version {first.get(STATE_KEY)!r}; this corgi-io reads {STATE_VERSION}")
    changed = [name for name in identity if first.get(name) != identity[name]]
    if changed:
        raise ResumeError(f"the saved state is of a different {', '.join(changed)} "
                          f"(saved {[first.get(n) for n in changed]}, now {[identity[n] for n in changed]})")
    shared = ("epoch", "finished_segments")
    yielded = {}
    for state in states:
        segment = state["segment"]
        if any(state.get(k) != first.get(k) for k in shared) or \
                (segment["world_size"], segment["num_workers"]) != (first["segment"]["world_size"],
                                                                     first["segment"]["num_workers"]):
            raise ResumeError("the worker states disagree: they were not saved by one loader at one step")
        yielded[int(segment["worker"])] = int(segment["yielded"])
    return {"epoch": int(first["epoch"]), "finished": list(first["finished_segments"]),
            "world_size": int(first["segment"]["world_size"]), "num_workers": int(first["segment"]["num_workers"]),
            "yielded": yielded}

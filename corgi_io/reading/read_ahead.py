"""Read-ahead stage: run a blocking `read` on a few threads, a bounded number of steps ahead of the consumer.

`read_ahead(steps, read, ahead=, threads=)` yields `read(step)` for every step, in the steps'
order, while up to `ahead` reads are submitted but not yet consumed: several are in flight at
once (it matters for HTTP, object stores and Lustre RPCs) and the bytes held stay bounded.  A
`Marker` step is not read: it passes through in its place (the reader marks the end of a
buffer with one).  An exception raised by a read, or by the steps' iterator, reaches the
consumer; closing the generator cancels the reads not yet started and waits for the running ones.  With a
`clock` (`corgi_io.timing.clock.StageClock`), the consumer's wait for a read is timed as ``read_wait``, and so is
its wait on storage while the steps' iterator makes the next step (a lazy plan reading a remote manifest's rows).
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from corgi_io.storage.base import waited_seconds
from corgi_io.timing.clock import NULL_CLOCK
from corgi_io.timing.stages import stage_index

READ_WAIT = stage_index("read_wait")


class Marker(NamedTuple):
    """A step that `read_ahead` passes through unread, in its place."""

    value: object


def read_ahead(steps, read, *, ahead: int, threads: int, on_submit=None, clock=NULL_CLOCK):
    """Yield `read(step)` (or the Marker itself) for each step, with at most `ahead` reads not yet consumed.

    `on_submit(step)`, when given, runs in the consumer's thread as each read is submitted
    (the reader counts the bytes it commits there).
    """
    steps, queue, unconsumed = iter(steps), deque(), 0
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="corgi-read") as pool:
        try:
            while True:
                while unconsumed < ahead:
                    waited = waited_seconds()  # a lazy plan may fetch a remote manifest's rows for its next step
                    step = next(steps, None)
                    clock.waited_on_storage(waited_seconds() - waited)
                    if step is None:
                        break
                    if isinstance(step, Marker):
                        queue.append(step)
                        continue
                    if on_submit is not None:
                        on_submit(step)
                    queue.append(pool.submit(read, step))
                    unconsumed += 1
                if not queue:
                    return
                item = queue.popleft()
                if isinstance(item, Marker):
                    yield item
                    continue
                unconsumed -= 1
                left = clock.switch(READ_WAIT)
                item.exception()  # waits for the read; no local name keeps its samples alive past the next step
                clock.switch(left)
                yield item.result()
        finally:
            for item in queue:
                if not isinstance(item, Marker):
                    item.cancel()

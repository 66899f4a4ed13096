"""Pack tasks on a Dask distributed cluster: ``corgi pack --dask ADDRESS`` and ``pack(..., client=...)``.

The tasks are the ones the local pool runs (`unit_task.write_unit` over `WriteTask`s, and the
--dedup hash tasks): each worker reads its unit, writes its shards straight into OUTPUT (a file
system every worker and the driver share) and sends back a `UnitDone` of a few numbers, so the
bytes are those of a local pack.

* Bounded: at most TASKS_AHEAD tasks per worker thread sit in the scheduler, so 10^5 shards never
  become 10^5 futures at once; the count follows the cluster as it scales.
* A task that raises is rerun `retries` times (Dask's ``retries``); a task whose worker dies is
  rerun on another by the scheduler, up to ``distributed.scheduler.allowed-failures`` deaths (3 by
  default), after which it fails with ``KilledWorker``.  A task that still fails raises PackError
  naming its shard in the driver; the shards already finished stay, and a rerun resumes.
* A killed worker leaves its temporary shard behind: the driver removes every temporary file in
  OUTPUT when the pack finishes (output.finish_output), as after a local crash.
* Progress: a remote task cannot report live, so each UnitDone's ``progress`` is counted when it
  arrives.

Dask is an optional extra (``corgi-io[dask]``): nothing here imports it until a cluster is used.
"""
from __future__ import annotations

import contextlib
import itertools
import re
import time
import uuid
from pathlib import Path

from corgi_io.errors import ArgumentError, CorgiError, PackError

RETRIES = 2            # reruns of a task that raised (a dead worker's task is rerun by the scheduler anyway)
TASKS_AHEAD = 2        # tasks queued per worker thread
RECOUNT_SECONDS = 1.0  # how often the driver asks the scheduler how many threads the cluster has
LOCAL = re.compile(r"local(?::([1-9]\d*))?")
INSTALL_HINT = "Dask distributed is not installed: pip install 'corgi-io[dask]'"


def parse_address(address: str):
    """``local`` -> None (default size), ``local:N`` -> N (a LocalCluster of N workers); a scheduler
    address (``tcp://host:8786``, ``tls://...``) is returned as it is.  Anything else: ArgumentError."""
    if (match := LOCAL.fullmatch(address)) is not None:
        return int(match.group(1)) if match.group(1) else None
    if re.fullmatch(r"[a-z][a-z0-9+.-]*://\S+", address):
        return address
    raise ArgumentError(f"{address!r} is neither local, local:N nor a scheduler address such as tcp://host:8786")


@contextlib.contextmanager
def dask_client(address: str, default_workers: int):
    """A ``distributed.Client`` for ADDRESS (see `parse_address`), closed on exit.

    ``local[:N]`` starts a LocalCluster of N worker processes (`default_workers` without N), one
    thread each (the tasks hold the GIL while they encode), its dashboard (if bokeh is installed) on
    a free port; it stops on exit.
    """
    target = parse_address(address)
    try:
        import distributed
    except ImportError as exc:
        raise PackError(INSTALL_HINT) from exc
    if isinstance(target, str):
        with distributed.Client(target) as client:
            yield client
        return
    with distributed.LocalCluster(n_workers=target or default_workers, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        yield client


class DaskExecutor:
    """Runs shard tasks on the cluster behind `client` (a ``distributed.Client``); see the module docstring."""

    def __init__(self, client, retries: int = RETRIES):
        self.client, self.retries = client, retries
        self._pending = {}  # future -> its task
        self._threads, self._counted = 1, float("-inf")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        """Cancel the tasks not yet finished (after a failure); running ones end on their own."""
        if self._pending:
            self.client.cancel(list(self._pending))
            self._pending.clear()

    def run(self, function, tasks, progress=None):
        """function(task) on the cluster for every task (each with a ``path``, named in errors), results as
        they finish; `progress(samples, nbytes)` hears each result's ``progress``."""
        from distributed import as_completed

        tasks, finished = iter(tasks), as_completed()
        self._submit(function, tasks, finished)
        for future in finished:
            task = self._pending.pop(future)
            result = self._result(future, task)
            if progress is not None:
                progress(*result.progress)
            yield result
            self._submit(function, tasks, finished)

    def _submit(self, function, tasks, finished) -> None:
        """Top the tasks in the scheduler up to TASKS_AHEAD per worker thread."""
        for task in itertools.islice(tasks, max(0, TASKS_AHEAD * self._cluster_threads() - len(self._pending))):
            key = f"corgi-{Path(task.path).name}-{uuid.uuid4().hex}"
            future = self.client.submit(function, task, key=key, retries=self.retries)  # a new key: never cached
            self._pending[future] = task
            finished.add(future)

    def _cluster_threads(self) -> int:
        """The cluster's worker threads (at least 1: a cluster still scaling up may have none yet)."""
        now = time.monotonic()
        if now - self._counted >= RECOUNT_SECONDS:
            self._threads, self._counted = max(1, sum(self.client.nthreads().values())), now
        return self._threads

    def _result(self, future, task):
        """The task's result; its failure as one PackError that names the shard (a CorgiError as it is)."""
        from distributed import KilledWorker

        try:
            return future.result()
        except CorgiError:
            raise
        except KilledWorker as exc:
            raise PackError(f"{task.path}: {exc.allowed_failures + 1} Dask workers died while writing it "
                            "(distributed.scheduler.allowed-failures); finished shards are kept: rerun to resume"
                            ) from exc
        except Exception as exc:
            first_line = next(iter(str(exc).splitlines()), "")
            raise PackError(f"{task.path}: {type(exc).__name__}: {first_line} (failed {self.retries + 1} times on "
                            "Dask; finished shards are kept: rerun to resume)") from exc

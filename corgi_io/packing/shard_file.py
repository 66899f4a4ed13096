"""Writing one shard file: under a temporary name, fsync'd, then renamed into place only when whole.

`finish` writes the trailer, fsyncs, writes the format's sidecars and the shard's record, and
only then renames the shard to its final name: a shard under its final name is always complete
and has its record, so a pack interrupted at any point resumes from the shards that exist.
Writes run on a thread beside the encoding (the write system call releases the GIL), and
write-back to the disk starts while the shard grows, so the final fsync waits only for the tail.
An OSError while writing (a full disk) names the shard, so that it reports as one line.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corgi_io.atomic import temp_name
from corgi_io.packing.records import ShardDone, save_record


@contextlib.contextmanager
def naming(path):
    """Give an OSError raised inside that names no file (a failed write or fsync) the name `path`.

    The CLI reports an OSError that names its file as one line; one that names none is a traceback.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(path)
        raise


class ShardFile:
    """One shard of format `fmt` being written to `path`."""

    def __init__(self, fmt, path):
        self.fmt, self.path = fmt, Path(path)
        # pid and a random tag: two attempts at one shard (a task retried elsewhere) never share a file
        self.temp_path = self.path.with_name(temp_name(self.path.name, f"{os.getpid()}-{secrets.token_hex(4)}"))
        self.file = open(self.temp_path, "wb", buffering=0)
        self.size = 0
        self._threads = ThreadPoolExecutor(2, thread_name_prefix="corgi-shard")
        self._writing = self._flushing = None

    def write(self, data: bytes) -> None:
        """Append `data` (on the writer thread, once the previous append is done)."""
        self._wait(self._writing)
        self._writing = self._threads.submit(self._write_all, data)
        self.size += len(data)

    def _write_all(self, data: bytes) -> None:
        """Write all of `data` (an unbuffered write may write less, on a nearly full disk), then start
        write-back of what is written so far unless it is still running from the last time."""
        view = memoryview(data)
        while view:
            view = view[self.file.write(view):]
        if self._flushing is None or self._flushing.done():
            self._wait(self._flushing)
            self._flushing = self._threads.submit(os.fdatasync, self.file.fileno())

    @staticmethod
    def _wait(job) -> None:
        """Wait for a background job; raise its error (a later fsync would not repeat a write-back error)."""
        if job is not None:
            job.result()

    def finish(self, done: ShardDone, record_path, columns: dict) -> ShardDone:
        """Close the shard, save its sidecars and record, rename it into place."""
        self.write(self.fmt.TRAILER)
        self._wait(self._writing)
        self._threads.shutdown(wait=True)
        self._wait(self._flushing)
        os.fsync(self.file.fileno())
        self.file.close()
        self.fmt.write_sidecars(self.path, columns["offset"], columns["length"])
        save_record(record_path, done, columns)
        os.replace(self.temp_path, self.path)
        return done

    def abort(self) -> None:
        """Drop the temporary file of an unfinished shard."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        self.file.close()
        self.temp_path.unlink(missing_ok=True)

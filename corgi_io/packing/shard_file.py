"""Writing one shard file: under a temporary name, fsync'd, then renamed into place only when whole.

`seal` writes the trailer, fsyncs and writes the format's sidecars; `publish` renames the shard
to its final name once its unit's record is saved (shard_writer.py): a shard under its final name
is always complete and has its record, so a pack interrupted at any point resumes from the shards that exist.
Records are appended on a thread beside the encoding with ``writev`` (the system call releases
the GIL, and the parts of the records are never joined into one buffer first), and write-back to
the disk starts while the shard grows, so the final fsync waits only for the tail.
An OSError while writing (a full disk) names the shard, so that it reports as one line.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corgi_io.storage.atomic import temp_name, writer_id

IOV_MAX = 1024  # buffers per writev call (POSIX's minimum for IOV_MAX is 16; Linux allows 1024)


@contextlib.contextmanager
def naming(where):
    """Give an OSError raised inside that names no file (a failed write or fsync) the name `where()` gives.

    The CLI reports an OSError that names its file as one line; one that names none is a traceback.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(where())
        raise


class ShardFile:
    """One shard of format `fmt` being written to `path`."""

    def __init__(self, fmt, path):
        self.fmt, self.path = fmt, Path(path)
        # host, pid and a random tag: two attempts at one shard (a task retried elsewhere) never share a file
        self.temp_path = self.path.with_name(temp_name(self.path.name, f"{writer_id()}-{secrets.token_hex(4)}"))
        self.fd = os.open(self.temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self.size = 0
        self._threads = ThreadPoolExecutor(2, thread_name_prefix="corgi-shard")
        self._writing = self._flushing = None

    def write(self, parts: list, size: int) -> None:
        """Append `parts` (`size` bytes in all) on the writer thread, once the previous append is done."""
        self._wait(self._writing)
        self._writing = self._threads.submit(self._write_all, parts)
        self.size += size

    def _write_all(self, parts: list) -> None:
        """Write all of `parts`, then start write-back of what is written so far unless it is still running."""
        for start in range(0, len(parts), IOV_MAX):
            group = parts[start:start + IOV_MAX]
            written = os.writev(self.fd, group)
            if written < sum(map(len, group)):  # a nearly full disk may take less: write the rest plainly
                rest = memoryview(b"".join(group))[written:]
                while rest:
                    rest = rest[os.write(self.fd, rest):]
        if self._flushing is None or self._flushing.done():
            self._wait(self._flushing)
            self._flushing = self._threads.submit(os.fdatasync, self.fd)

    @staticmethod
    def _wait(job) -> None:
        """Wait for a background job; raise its error (a later fsync would not repeat a write-back error)."""
        if job is not None:
            job.result()

    def seal(self, offsets, lengths) -> None:
        """Write the trailer, fsync and close the shard, and write its sidecars (records at `offsets`, `lengths`);
        it keeps its temporary name until `publish`."""
        self.write([self.fmt.TRAILER], len(self.fmt.TRAILER))
        self._wait(self._writing)
        self._threads.shutdown(wait=True)
        self._wait(self._flushing)
        os.fsync(self.fd)
        self._close()
        self.fmt.write_sidecars(self.path, offsets, lengths)

    def publish(self) -> None:
        """Rename the sealed shard to its final name (once whatever records it is saved)."""
        os.replace(self.temp_path, self.path)

    def abort(self) -> None:
        """Drop the temporary file of an unfinished shard (`seal` may have closed it already, or failed after)."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        self._close()
        self.temp_path.unlink(missing_ok=True)

    def _close(self) -> None:
        """Close the descriptor exactly once: `fd` is None from the moment it is closed (or the close failed),
        so that `abort` after `seal` never closes it twice, nor a descriptor another thread opened since."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

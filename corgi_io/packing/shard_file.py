"""Writing one shard: encoded blocks appended in order, renamed into place only when whole.

The shard is written under a temporary name; on `finish` its resume record (the
per-sample offsets, sizes and CRCs) is saved, then the shard is renamed to its final
name.  A shard file under its final name is therefore always complete, and a pack
interrupted at any point can be resumed from the shards that exist.  An OSError while
writing (a full disk) names the shard, so that it reports as one line.
"""
from __future__ import annotations

import contextlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corgi_io.packing.encode import EncodedBlock
from corgi_io.atomic import temp_name, write_atomic

COLUMNS = ("position", "block", "offset", "length", "data_offset", "size", "checksum")


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


class ShardWriter:
    """Appends encoded blocks to one shard file of a given format."""

    def __init__(self, fmt, path: Path, resume_path: Path):
        self.fmt, self.path, self.resume_path = fmt, Path(path), Path(resume_path)
        self.temp_path = self.path.with_name(temp_name(self.path.name))
        self.file = open(self.temp_path, "wb", buffering=0)
        self.position = 0
        self.columns = {name: [] for name in COLUMNS}
        self.skipped = []
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="corgi-flush")
        self._flushing = None

    def add_block(self, block_index: int, block: EncodedBlock) -> None:
        """Append planned block `block_index`, turning its relative offsets into shard offsets."""
        base = self.position
        with naming(self.path):
            size = self._append_spill(block.spill_path) if block.spill_path else self._write(block.data)
            if self._flushing is None or self._flushing.done():
                self._check_flushed()
                # start writing back what is appended so far, so the final fsync waits only for the tail
                self._flushing = self._flusher.submit(os.fdatasync, self.file.fileno())
        self.columns["position"] += block.position
        self.columns["block"] += [block_index] * len(block.position)
        self.columns["offset"] += [base + o for o in block.offset]
        self.columns["data_offset"] += [base + o for o in block.data_offset]
        for name in ("length", "size", "checksum"):
            self.columns[name] += getattr(block, name)
        self.position += size

    def _check_flushed(self) -> None:
        """Raise the I/O error of the last background write-back, which a later fsync would not repeat."""
        if self._flushing is not None:
            self._flushing.result()

    def _write(self, data: bytes) -> int:
        """Write all of `data` (an unbuffered write may write less, on a nearly full disk)."""
        view = memoryview(data)
        while view:
            view = view[self.file.write(view):]
        return len(data)

    def _append_spill(self, spill_path: str) -> int:
        """Append a spilled block with copy_file_range (no trip through Python), then delete it."""
        with open(spill_path, "rb") as spill:
            remaining = total = os.fstat(spill.fileno()).st_size
            try:
                while remaining:
                    remaining -= os.copy_file_range(spill.fileno(), self.file.fileno(), remaining)
            except OSError:  # a filesystem without copy_file_range: copy through user space
                spill.seek(total - remaining)
                while chunk := spill.read(1 << 20):
                    self._write(chunk)
        os.unlink(spill_path)
        return total

    def skip(self, relpath: str, reason: str) -> None:
        """Note a file of this shard that could not be packed (kept in the manifest)."""
        self.skipped.append({"path": relpath, "reason": reason})

    def finish(self) -> dict:
        """Close the shard, save its resume record, rename it into place; returns the resume record."""
        with naming(self.path):
            self._write(self.fmt.TRAILER)
            self._flusher.shutdown(wait=True)
            self._check_flushed()
            os.fsync(self.file.fileno())
            self.file.close()
        record = dict(self.columns, bytes=self.position + len(self.fmt.TRAILER), skipped=self.skipped)
        self.fmt.write_sidecars(self.path, self.columns["offset"], self.columns["length"])
        write_atomic(self.resume_path, json.dumps(record).encode())
        os.replace(self.temp_path, self.path)
        return record

    def abort(self) -> None:
        """Drop the temporary file of an unfinished shard."""
        self._flusher.shutdown(wait=True)
        self.file.close()
        self.temp_path.unlink(missing_ok=True)


def load_finished(path: Path, resume_path: Path):
    """The resume record of a shard that was finished earlier, or None if it must be rewritten."""
    try:
        record = json.loads(Path(resume_path).read_bytes())
        return record if os.path.getsize(path) == record["bytes"] else None
    except (OSError, ValueError, KeyError):
        return None

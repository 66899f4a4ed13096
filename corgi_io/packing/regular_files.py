"""Reading one input file whole, safely: only a regular file, never more than a limit, never blocking on a FIFO."""
from __future__ import annotations

import os
import stat

from corgi_io.errors import BadInput
from corgi_io.packing.skip_reasons import not_regular_reason, too_large

DEFAULT_MAX_SAMPLE_BYTES = 2 << 30  # a larger file is skipped before it is read (and TFRecord lengths stay sane)
MAX_READ = 0x7FFFF000  # the most one read() returns on Linux


def read_regular_file(path: str, most: int = DEFAULT_MAX_SAMPLE_BYTES, limit_name: str = "--max-sample-bytes") -> bytes:
    """The bytes of the regular file at `path`, at most `most`; anything else raises BadInput without being read.
    `limit_name` names the limit `most` is in the messages (the option that sets it).

    The walk already kept only regular files of at most `most` bytes, but the path may have been
    swapped or grown since: opened with O_NONBLOCK, a FIFO without a writer cannot block the open,
    and fstat on the open descriptor decides, so nothing but a regular file is ever read (O_NONBLOCK
    does not affect those); a file that grows past `most` while it is read is given up 1 MiB later.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(not_regular_reason(info.st_mode))
        reason = too_large(info.st_size, most, limit_name)
        if reason is not None:
            raise BadInput(reason)
        chunks, total, want = [], 0, info.st_size + 1  # all of it in one read, unless it grew since fstat
        while total <= most and (chunk := os.read(fd, want)):
            chunks.append(chunk)
            total += len(chunk)
            if len(chunk) < min(want, MAX_READ):  # a short read of a regular file is its end
                break
            want = 1 << 20
        if total > most:
            raise BadInput(f"grew past the limit of {most:,} bytes while it was read ({limit_name})")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)

"""A real small disk for tests of what a full one does: a tmpfs of a few blocks (or a few inodes) mounted on a folder.

Mounting needs root (or CAP_SYS_ADMIN); where this sandbox cannot mount, the test is skipped with the reason.
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, size: int, inodes: int | None = None):
    """`folder` (created) as a tmpfs of `size` bytes, and of `inodes` files and folders (its root included) when
    given, until the with-block ends; pytest.skip where no tmpfs can be mounted."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)

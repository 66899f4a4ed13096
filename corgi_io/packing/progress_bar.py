"""One progress line for the whole pack, from the first second: walk, plan, write, manifest.

A single tqdm bar is reset for each phase: the walk counts files found (files/s, no total), the
write phase counts samples against the samples to write, with MB/s of payload, and the manifest
counts its columns.  Off a terminal it stays silent unless forced.  Skipped inputs are warned one
line each above the bar, the first MAX_WARNINGS of them, then counted in one line at the end.
"""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from corgi_io.packing.skip_reasons import MAX_WARNINGS

SHOW_EVERY = 0.5  # seconds between MB/s updates


class PackProgress:
    """The pack's one tqdm display; `enabled=None` shows it only on a terminal."""

    def __init__(self, enabled):
        self.enabled, self.bar = enabled, None
        self.bytes, self.start, self.shown, self.warned = 0, time.perf_counter(), 0.0, 0

    def phase(self, name: str, unit: str, total: int | None = None) -> None:
        """Start counting `unit`s of phase `name` (against `total` when known); the last phase's final count stays
        on screen until this one's first."""
        if self.bar is None:
            self.bar = tqdm(disable=None if self.enabled is None else not self.enabled, dynamic_ncols=True,
                            unit_scale=True, file=sys.stderr, desc=name, unit=unit, total=total)
        else:
            self.bar.refresh()
            self.bar.set_description_str(name, refresh=False)
            self.bar.set_postfix_str("", refresh=False)
            self.bar.unit = unit
            self.bar.reset(total=total)
        self.bytes, self.start, self.shown = 0, time.perf_counter(), 0.0

    def advance(self, count: int, nbytes: int = 0) -> None:
        """`count` more units done, carrying `nbytes` payload bytes (shown as MB/s)."""
        self.bar.update(count)
        if nbytes:
            self.bytes += nbytes
            now = time.perf_counter()
            if now - self.shown > SHOW_EVERY:
                self.shown = now
                self.bar.set_postfix_str(f"{self.bytes / 1e6 / max(now - self.start, 1e-9):.1f} MB/s", refresh=False)

    def skipped(self, entries) -> None:
        """Warn about inputs a task skipped ({"path", "reason"} each)."""
        for entry in entries:
            self.warned += 1
            if self.warned <= MAX_WARNINGS:
                tqdm.write(f"corgi pack: warning: skipped {entry['path']}: {entry['reason']}", file=sys.stderr)

    def close(self) -> None:
        if self.warned > MAX_WARNINGS:
            tqdm.write(f"corgi pack: warning: skipped {self.warned - MAX_WARNINGS} more files, not shown; "
                       "columns/skipped.jsonl lists every skipped input with its reason", file=sys.stderr)
        if self.bar is not None:
            self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""A pytest plugin that measures each test's peak memory in the pytest process (issue 29: the suite stays under 4 GiB).

Before each test it resets the kernel's high-water mark (writing 5 to /proc/self/clear_refs), and after it
reads VmHWM (the peak since the reset) and VmRSS (what the test left held).  The session's summary names the
tests with the highest peaks and the process's peak; ``--memory-report FILE`` gets every test's figures as
JSON lines, each as its test ends.  Child processes (DataLoader workers, pack pools, servers) are not counted: they are bounded by
their own tests.  Where /proc is absent (not Linux) it measures nothing.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")
SHOWN = 8  # tests named in the summary


def status_kib(field: str) -> int | None:
    """A field of /proc/self/status in KiB (VmHWM, VmRSS), or None where there is no /proc."""
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.M)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def reset_peak() -> bool:
    """Start a new high-water mark for this process; False where the kernel does not allow it."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class MemoryRecorder:
    """Per test: (node id, peak MiB during the test, RSS MiB after it); and the whole session's peak."""

    def __init__(self, report: str | None):
        self.report, self.rows, self.session_peak = report, [], 0
        if report:
            Path(report).write_text("")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        resettable = reset_peak()
        yield
        peak, rss = status_kib("VmHWM"), status_kib("VmRSS")
        if peak is None or rss is None:
            return
        self.session_peak = max(self.session_peak, peak)
        if resettable:
            self.rows.append((item.nodeid, peak / 1024, rss / 1024))
            self.write(item.nodeid, peak / 1024, rss / 1024)

    def write(self, nodeid: str, peak: float, rss: float) -> None:
        """Append one test's figures to the report as it ends (a run killed for memory still leaves them)."""
        if self.report:
            with open(self.report, "a", encoding="utf-8") as out:
                out.write(json.dumps({"test": nodeid, "peak_mib": round(peak, 1), "rss_after_mib": round(rss, 1)})
                          + "\n")

    def pytest_terminal_summary(self, terminalreporter):
        if not self.rows:
            return
        worst = sorted(self.rows, key=lambda row: -row[1])[:SHOWN]
        terminalreporter.write_sep("-", f"memory: the pytest process peaked at {self.session_peak / 1024:.0f} MiB")
        for nodeid, peak, rss in worst:
            terminalreporter.write_line(f"{peak:8.0f} MiB peak {rss:8.0f} MiB after  {nodeid}")

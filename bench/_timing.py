"""Timing helper shared by the benchmarks: these machines are noisy, so take the best of several runs."""
from __future__ import annotations

import time


def best_of(function, repeat: int, before=None) -> float:
    """Fastest of `repeat` timed calls of `function`; `before` (untimed) runs ahead of each call."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)

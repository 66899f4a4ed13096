"""Timing helper shared by the benchmarks: these machines are noisy, so take the best of several runs."""
from __future__ import annotations

import statistics
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


def interleaved_medians(functions: dict, rounds: int, before=None) -> dict:
    """{name: median seconds} of `rounds` rounds that each time every function once, in turn.

    Interleaving spreads a noisy neighbour's load over all contenders instead of one.  `before`
    (untimed) runs ahead of each call.
    """
    times = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            if before is not None:
                before()
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}

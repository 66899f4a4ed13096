"""litdata as a pack-time peer: import it if it is installed, and run `litdata.optimize` quietly.

litdata is not a dependency of the bench extra (its metadata pulls torchvision and a CUDA torch);
the benches that compare with it install it by hand, without its dependencies:

    pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 requests
"""
from __future__ import annotations

INSTALL = "pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 requests"
WORKERS = 2  # the processes each contender of the pack-time benches gets
LITDATA = f"litdata.optimize(num_workers={WORKERS})"  # the baseline's name in their lines


def import_litdata():
    """(the litdata module, None), or (None, a one-line note saying why it cannot be imported and how to install it)."""
    try:
        import litdata
    except ImportError as exc:
        return None, f"# litdata: not importable ({type(exc).__name__}: {exc}); {INSTALL}"
    return litdata, None


def optimize(litdata, fn, inputs: list, output_dir, workers: int, chunk_bytes: int) -> None:
    """`litdata.optimize` as a user calls it (its default start method, spawn), with verbose=False, which
    silences its progress bar and its per-worker lines, so that a bench prints only its own lines."""
    litdata.optimize(fn=fn, inputs=inputs, output_dir=str(output_dir), num_workers=workers,
                     chunk_bytes=chunk_bytes, verbose=False)


def fixed_cost(litdata, fn, inputs: list, output_dir, workers: int, chunk_bytes: int) -> float:
    """Seconds of an `optimize` of the first `workers` inputs only: litdata's fixed cost (spawned workers'
    start-up, index writing), printed beside a bench's lines to read its ratio; `output_dir` is removed after."""
    import shutil
    import time

    start = time.perf_counter()
    optimize(litdata, fn, inputs[:workers], output_dir, workers, chunk_bytes)
    seconds = time.perf_counter() - start
    shutil.rmtree(output_dir, ignore_errors=True)
    return seconds


def fixed_cost_line(seconds: float, median: dict) -> str:
    """The comment line that puts litdata's fixed cost beside its median, so its ratio can be read."""
    return (f"# {LITDATA} of {WORKERS} inputs only (its fixed cost: spawned workers, index): {seconds:.1f} s, "
            f"of its median {median[LITDATA]:.1f} s")


def ratio_text(median: dict, seconds: float) -> str:
    """" ratio R.RRx vs litdata.optimize(...)" for a contender's `seconds`, or "" when litdata did not run."""
    baseline = median.get(LITDATA)
    return "" if baseline is None else f" ratio {baseline / seconds:5.2f}x vs {LITDATA}"

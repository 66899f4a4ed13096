"""What `corgi profile` shows: the per-stage table of a profiled run, its verdict, and its timeline as a PNG.

Plain data in (`corgi_io.loaders.profile_run.profile_loader`'s result: the run's figures, the dataset's
``stats.snapshot()`` and the slots' intervals), no torch.  Per stage (`corgi_io.timing.stages.STAGES`):

* **path s** and **share**: its seconds on the critical path (`snapshot()["path"]`): a worker's stages averaged
  over the workers, the read stages sharing out the worker's ``read_wait``, as a share of that worker's time;
  the trainer's stages as a share of the training loop's time;
* **thread s**, **bytes**, **samples**, **calls**: totals over every worker and reading thread
  (`snapshot()["total"]`); **MB/s** is bytes over thread seconds, where bytes are counted; **ms/sample** the
  cost of one sample's decode or transform, what `corgi plan --simulate --decode-ms` takes.
"""
from __future__ import annotations

from corgi_io.report.stats import counted, short_number
from corgi_io.timing.stages import NESTED, STAGES

PER_SAMPLE = ("decode", "transform")  # the stages priced per sample (one call per sample)
SIDES = ("trainer", "worker")          # a slot's consumer sides, whose stages partition a thread's time
SIDE = {stage.name: stage.side for stage in STAGES}
ORDER = {stage.name: i for i, stage in enumerate(STAGES)}  # drawing order: later stages over earlier ones
COLUMNS = (("stage", "<12"), ("side", "<8"), ("path s", ">9"), ("share", ">7"), ("thread s", ">10"),
           ("bytes", ">8"), ("samples", ">9"), ("calls", ">7"), ("MB/s", ">8"), ("ms/sample", ">10"))


def summarize(run: dict) -> dict:
    """The run as `corgi profile --json` gives it: the run's figures, a row per stage that ran, the consumer
    time of each slot against the span of its intervals, the per-sample cost, the stall share and the verdict."""
    snapshot = run["snapshot"]
    rows = [_stage_row(stage, snapshot) for stage in STAGES if stage.name in snapshot["total"]]
    decode = [row["ms_per_sample"] for row in rows if row["ms_per_sample"] is not None]
    figures = {key: run[key] for key in ("pack", "workers", "step_ms", "epoch", "epoch_items", "items", "samples",
                                         "wall_seconds", "samples_per_second")}
    return {**figures, "stages": rows, "slots": _slots(snapshot["slots"], run["events"]),
            "decode_ms_per_sample": sum(decode) if decode else None, "stall_share": snapshot["stall_share"],
            "verdict": snapshot["verdict"]}


def _stage_row(stage, snapshot: dict) -> dict:
    """One stage's row: path seconds and share of its side's path, totals, MB/s and ms/sample where they apply."""
    path, total = snapshot["path"], snapshot["total"][stage.name]
    trainer = stage.side == "trainer"
    group = sum(seconds for name, seconds in path.items() if (SIDE[name] == "trainer") == trainer)
    seconds = path.get(stage.name, 0.0)
    per = total["samples"] or total["calls"]
    return {"stage": stage.name, "side": stage.side, "path_seconds": seconds,
            "share": None if stage.name in NESTED or group <= 0 else seconds / group,
            "thread_seconds": total["seconds"], "bytes": total["bytes"], "samples": total["samples"],
            "calls": total["calls"],
            "mb_per_s": total["bytes"] / 1e6 / total["seconds"] if total["bytes"] and total["seconds"] > 0 else None,
            "ms_per_sample": 1000 * total["seconds"] / per if stage.name in PER_SAMPLE and per else None}


def _slots(tables: dict, events: dict) -> dict:
    """Per slot and consumer side (trainer, worker): the seconds its stages add up to, and the span from its
    first interval's start to its last's end (the newest kept intervals): the two agree when nothing is lost."""
    out = {}
    for slot, table in tables.items():
        kept = events.get(slot, [])
        for side in SIDES:
            seconds = sum(v["seconds"] for name, v in table.items() if SIDE[name] == side)
            spans = [(start, end) for name, start, end in kept if SIDE[name] == side]
            if seconds > 0:
                span = max(e for _, e in spans) - min(s for s, _ in spans) if spans else None
                out.setdefault(slot, {})[side] = {"seconds": seconds, "span_seconds": span}
    return out


def render(summary: dict) -> str:
    """Terminal text: the run in one line, the stage table, each slot's timed seconds, the per-sample cost and
    the verdict."""
    s = summary
    lines = [f"{s['pack']}: {_batches(s['items'])} ({counted(s['samples'], 'sample')}) in "
             f"{s['wall_seconds']:.3f} s, {s['samples_per_second']:,.1f} samples/s; "
             f"{counted(s['workers'], 'worker')}, a {s['step_ms']:g} ms step, epoch {s['epoch']} "
             f"({_batches(s['epoch_items'])})", "",
             "".join(f"{name:{align}}" for name, align in COLUMNS)]
    lines += [_row_line(row) for row in s["stages"]]
    lines += ["", "path s: seconds on the critical path (workers averaged; read stages share the read_wait)",
              "share: of a worker's time, or of the training loop's; MB/s: bytes over thread seconds",
              "per slot, seconds timed / span: " +
              ", ".join(f"{_label(slot, side)} {v['seconds']:.3f} / {_seconds(v['span_seconds'])}"
                        for slot, sides in s["slots"].items() for side, v in sides.items())]
    if s["decode_ms_per_sample"] is not None:
        lines.append(f"per sample: {s['decode_ms_per_sample']:.3f} ms decode and transform "
                     f"(corgi plan --simulate --decode-ms {s['decode_ms_per_sample']:.3g})")
    return "\n".join(lines + [f"verdict: {s['verdict']}"])


def _row_line(row: dict) -> str:
    cells = (row["stage"], row["side"], f"{row['path_seconds']:.4f}", _optional(row["share"], "{:.1%}"),
             f"{row['thread_seconds']:.4f}", short_number(row["bytes"]) if row["bytes"] else "-",
             f"{row['samples']:,}" if row["samples"] else "-", f"{row['calls']:,}",
             _optional(row["mb_per_s"], "{:.1f}"), _optional(row["ms_per_sample"], "{:.3f}"))
    return "".join(f"{cell:{align}}" for cell, (_, align) in zip(cells, COLUMNS))


def _label(slot: str, side: str) -> str:
    """A slot's consumer row: "worker 0", "trainer", and "trainer (loader)" for the loader's stages run in the
    training process (no DataLoader workers)."""
    return f"{slot} (loader)" if side == "worker" and slot == "trainer" else slot


def _batches(n: int) -> str:
    return f"{n:,} batch{'' if n == 1 else 'es'}"


def _optional(value, form: str) -> str:
    return "-" if value is None else form.format(value)


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.3f} s"


def plot_timeline(events: dict, path) -> None:
    """Write `timeline_figure(events)` to the PNG `path`."""
    timeline_figure(events).savefig(path, dpi=100)


def timeline_figure(events: dict):
    """A matplotlib Figure: one row per slot (the training process, each worker) of its consumer's stages over
    time, its reading threads' intervals on a thinner row beneath (overlapping where threads overlap), one
    colour per stage.  `events`: per slot, ``[stage, start, end]`` in seconds (`profile_loader`'s)."""
    try:
        from matplotlib import colormaps
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'corgi-io[plot]'") from None
    rows = timeline_rows(events)
    colours = {stage.name: colormaps["tab20"]((2 * i) % 20 + (2 * i) // 20) for i, stage in enumerate(STAGES)}
    fig = Figure(figsize=(12, 1.5 + 0.45 * len(rows)), layout="tight")
    ax = fig.subplots()
    for y, (_, height, bars) in enumerate(rows):
        for stage, spans in sorted(bars.items(), key=lambda bar: ORDER[bar[0]]):  # hand-overs over their `order`
            ax.broken_barh(spans, (-y - height / 2, height), facecolors=colours[stage],
                           alpha=0.6 if height < 0.5 else 1.0)
    ax.set_yticks([-y for y in range(len(rows))], [label for label, _, _ in rows])
    ax.set(xlabel="seconds since the loop began", title="where the time goes, per slot (corgi profile)")
    shown = [stage.name for stage in STAGES if any(stage.name in bars for _, _, bars in rows)]
    ax.legend(handles=[Patch(color=colours[name], label=name) for name in shown], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def timeline_rows(events: dict) -> list:
    """The timeline's rows, top to bottom: (label, height, {stage: [(start, duration)]}) for each slot's trainer,
    worker and read intervals that exist (the training process holds all three without DataLoader workers)."""
    rows = []
    for slot, kept in events.items():
        for side, height in (("trainer", 0.8), ("worker", 0.8), ("read", 0.35)):
            bars = {}
            for stage, start, end in kept:
                if SIDE[stage] == side:
                    bars.setdefault(stage, []).append((start, end - start))
            if bars:
                rows.append((f"{slot} reads" if side == "read" else _label(slot, side), height, bars))
    return rows

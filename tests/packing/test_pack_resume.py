"""Resume after `kill -9`: finished shards are kept as they are, the rest rewritten, every sample once."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corgi_io.manifest import open_manifest
from corgi_io.storage.atomic import temp_name
from helpers.corpus_factory import write_text

pytestmark = pytest.mark.slow  # launches and kills `corgi pack` processes

N_FILES = 160
# A --size-fn that takes a little while per file, so that the pack runs long enough to be
# killed half-way on any machine; the sleep doubles on each retry if a pack ever finishes first.
SLOW_SIZES = '''
import os, time

def tokens(path):
    time.sleep(float(os.environ["CORGI_TEST_SLEEP"]))
    with open(path, "rb") as f:
        return len(f.read().decode("utf-8").split())
'''


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume") / "corpus"
    sizes = {f"c{i % 4}/doc_{i:04d}.txt": write_text(root / f"c{i % 4}/doc_{i:04d}.txt", 20 + i % 50, seed=i)
             for i in range(N_FILES)}
    mods = root.parent / "mods"
    mods.mkdir()
    (mods / "corgi_test_slow_sizes.py").write_text(SLOW_SIZES)
    return root, sizes, mods


def finished_shards(out: Path, suffix: str) -> list:
    return sorted(p for p in out.glob(f"shard-*{suffix}") if p.is_file())


def run_and_kill(cmd, env, out: Path, suffix: str, want: int, timeout: float = 60.0) -> bool:
    """Start `cmd`; SIGKILL its process group once `want` shards are finished and the next one is being
    written (a temporary shard exists).  False if the pack ended before that."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False  # finished (or failed) before we could kill it
            if len(finished_shards(out, suffix)) >= want and list(out.glob(temp_name(f"shard-*{suffix}", "*"))):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.002)
        pytest.fail(f"no {want} finished shards within {timeout} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stderr.close()


@pytest.fixture(scope="module", params=[("wds", 1), ("tfrecord", 2)], ids=["wds-workers1", "tfrecord-workers2"])
def resumed(request, text_corpus, tmp_path_factory):
    """Pack, kill -9 half-way, rerun the same command.  Returns a dict describing what happened."""
    fmt, workers = request.param
    root, sizes, mods = text_corpus
    base = tmp_path_factory.mktemp(f"resumed-{fmt}")
    suffix = ".tar" if fmt == "wds" else ".tfrecord"
    sleep = 0.01
    for attempt in range(4):
        out = base / f"out{attempt}"
        env = dict(os.environ, CORGI_TEST_SLEEP=str(sleep),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")])))
        cmd = ["corgi", "pack", str(root), str(out), "--format", fmt, "--workers", str(workers),
               "--block-samples", "2", "--shard-bytes", "6k", "--size-fn", "corgi_test_slow_sizes:tokens"]
        if run_and_kill(cmd, env, out, suffix, want=3) and not (out / "manifest.json").exists():
            break
        sleep *= 2  # the pack outran the poll: make it slower
    else:
        pytest.fail("the pack always finished before it could be killed")
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in finished_shards(out, suffix)}
    left_at_kill = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
    env["CORGI_TEST_SLEEP"] = "0"
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    return dict(fmt=fmt, out=out, cmd=cmd, env=env, kept=kept, left_at_kill=left_at_kill, sizes=sizes, base=base)


def test_every_sample_exactly_once(resumed):
    m = open_manifest(resumed["out"])
    sizes = resumed["sizes"]
    assert len(m.shards) > len(resumed["kept"]) >= 3, "the kill came after the last shard"
    assert sorted(m.keys()) == sorted(rel[:-4] for rel in sizes)
    size_of = {rel[:-4]: n for rel, n in sizes.items()}
    assert [size_of[k] for k in m.keys()] == m.samples.size.tolist()
    from corgi_io.report.verify import verify

    report = verify(resumed["out"])
    assert report.ok and report.samples_checked == m.num_samples


def test_finished_shards_were_not_rewritten(resumed):
    out = resumed["out"]
    for name, (ino, mtime, data) in resumed["kept"].items():
        st = (out / name).stat()
        assert (st.st_ino, st.st_mtime_ns) == (ino, mtime), f"{name} was rewritten"
        assert (out / name).read_bytes() == data


def test_resumed_pack_equals_a_single_run(resumed):
    """Same files, same manifest, same record contents."""
    import numpy as np

    from corgi_io.formats import get_format

    whole, out = resumed["base"] / "whole", resumed["out"]
    cmd = resumed["cmd"]
    single = subprocess.run([*cmd[:3], str(whole), *cmd[4:]], env=resumed["env"], capture_output=True, text=True,
                            timeout=120)
    assert single.returncode == 0, single.stderr
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    a, b = open_manifest(out), open_manifest(whole)
    assert a.keys() == b.keys() and a.labels == b.labels
    for column in ("label", "kind", "bytes", "size", "shard", "offset", "length"):
        assert np.array_equal(getattr(a.samples, column), getattr(b.samples, column)), column
    for name in names:
        if name.startswith("manifest") or name == "columns":
            continue
        if resumed["fmt"] == "wds" or name.endswith(".index"):
            assert (out / name).read_bytes() == (whole / name).read_bytes(), name
        else:
            fmt = get_format(resumed["fmt"])
            mine = [(r.key, r.data, r.label) for r in fmt.parse_block((out / name).read_bytes())]
            theirs = [(r.key, r.data, r.label) for r in fmt.parse_block((whole / name).read_bytes())]
            assert mine == theirs, name
    if resumed["fmt"] == "wds":
        for column in sorted((whole / "columns").iterdir()):
            assert (out / "columns" / column.name).read_bytes() == column.read_bytes(), column.name


def test_no_partial_state_left(resumed):
    out = resumed["out"]
    assert resumed["left_at_kill"], "the kill should have left a temporary shard and partial state behind"
    assert not (out / ".corgi-partial").exists()
    assert not [p.name for p in out.iterdir() if "spill" in p.name]


def test_no_temporary_files_left(resumed):
    out = resumed["out"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".") or ".tmp" in p.name) == []

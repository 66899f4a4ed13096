"""The README works on its own example: its first command, the five-minute commands and the training
snippet, taken from README.md as printed and run in fresh processes (only /tmp/corgi-example is moved
into the test's own folder, and the pip install is left out: the tests run on this checkout)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corgi_io import open_manifest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
EXAMPLE_PACK = "/tmp/corgi-example"
INSTALL = "pip install -e . && "

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("corgi") is None, reason="the corgi command is needed: pip install -e .")]


def section(title: str) -> str:
    """The README's text under `## title`, up to the next `## ` heading."""
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def run(command, cwd: Path, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def example_pack(tmp_path_factory) -> Path:
    """The pack that the README's first command makes, made by that command (pip install left out)."""
    setup = blocks(section("Two commands"), "bash")
    assert len(setup) == 2, "the README promises two set-up commands"
    first, = setup[0].strip().splitlines()
    assert first.startswith(INSTALL) and EXAMPLE_PACK in first, first
    pack = tmp_path_factory.mktemp("readme") / "corgi-example"
    proc = run(["bash", "-c", first[len(INSTALL):].replace(EXAMPLE_PACK, str(pack))], cwd=ROOT)
    m = open_manifest(pack)
    assert f"\n{m.num_samples} samples in " in proc.stdout, proc.stdout  # `corgi stats` ran
    assert m.num_samples > 0 and set(m.samples.kind) == {0}  # images only (KINDS[0])
    return pack


def test_the_five_minute_commands_run_on_the_example_pack(example_pack, tmp_path):
    commands, = blocks(section("Five minutes from zero to a training loop"), "bash")
    for line in commands.strip().splitlines():
        command = line.split("#", 1)[0].strip().replace(EXAMPLE_PACK, str(example_pack))
        run(["bash", "-c", command], cwd=tmp_path)
    assert (tmp_path / "sizes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_training_snippet_runs_as_printed_on_the_example_pack(example_pack, tmp_path):
    pytest.importorskip("torch", reason="pip install torch==2.13.0 && pip install -e '.[torch]'")
    snippet, = blocks(section("Five minutes from zero to a training loop"), "python")
    epochs = re.findall(r"for epoch in range\((\d+)\):", snippet)
    assert epochs and int(epochs[0]) <= 5, "the snippet's epochs bound its run time"
    script = tmp_path / "snippet.py"
    script.write_text(snippet.replace(f'"{EXAMPLE_PACK}"', repr(str(example_pack))), encoding="utf-8")
    proc = run([sys.executable, str(script)], cwd=tmp_path)
    assert f"epoch {int(epochs[0]) - 1}: " in proc.stdout, proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr

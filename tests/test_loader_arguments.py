"""The loaders refuse what cannot work, at once and in the user's words: no torch, and read-ahead
counts that are not counts."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")

from corgi_io import PackOptions, pack  # noqa: E402
from corgi_io.loaders import CorgiPileDataset  # noqa: E402
from corpus_factory import write_text  # noqa: E402


def test_loaders_without_torch_say_how_to_install_it():
    code = "import sys; sys.modules['torch'] = None\nimport corgi_io.loaders"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "ModuleNotFoundError: corgi_io.loaders needs PyTorch: pip install 'corgi-io[torch]'", proc.stderr


@pytest.fixture(scope="module")
def text_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("args")
    for i in range(4):
        write_text(root / "src" / "a" / f"{i}.txt", 5, seed=i)
    pack(root / "src", root / "out", PackOptions(), workers=1)
    return root / "out"


@pytest.mark.parametrize("arguments, message", [
    ({"buffer_blocks": 0}, "buffer_blocks must be >= 1, got 0"),
    ({"buffer_blocks": -3}, "buffer_blocks must be >= 1, got -3"),
    ({"buffer_blocks": 2.5}, "buffer_blocks must be an integer, got 2.5"),
    ({"prefetch_blocks": -1}, "prefetch_blocks must be >= 0, got -1"),
    ({"prefetch_blocks": True}, "prefetch_blocks must be an integer, got True"),
])
def test_read_ahead_counts_are_refused_at_construction(text_pack, arguments, message):
    with pytest.raises(ValueError) as caught:
        CorgiPileDataset(text_pack, **arguments)
    assert str(caught.value) == message


def test_the_smallest_read_ahead_still_reads_every_sample(text_pack):
    dataset = CorgiPileDataset(text_pack, buffer_blocks=1, prefetch_blocks=0)
    assert sorted(sample["key"] for sample in dataset) == [f"a/{i}" for i in range(4)]

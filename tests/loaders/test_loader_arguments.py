"""The loaders refuse what cannot work, at once and in the user's words: no torch, and every argument
of the wrong type or out of range, by name, when the dataset is built (before any read, so nothing
fails later in DataLoader workers), as an ArgumentError that is also a ValueError and a TypeError."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")

from corgi_io import ArgumentError, CorgiError, PackOptions, pack  # noqa: E402
from corgi_io.loaders import CorgiPileDataset  # noqa: E402
from helpers.corpus_factory import write_text  # noqa: E402


@pytest.mark.slow
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


BAD_ARGUMENTS = [
    ({"seed": "x"}, "seed must be an int >= 0, got 'x'"),
    ({"seed": None}, "seed must be an int >= 0, got None"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"seed": 1.7}, "seed must be an int >= 0, got 1.7"),
    ({"seed": True}, "seed must be an int >= 0, got True"),
    ({"buffer_blocks": 0}, "buffer_blocks must be >= 1, got 0"),
    ({"buffer_blocks": -3}, "buffer_blocks must be >= 1, got -3"),
    ({"buffer_blocks": 2.5}, "buffer_blocks must be an int >= 1, got 2.5"),
    ({"prefetch_blocks": -1}, "prefetch_blocks must be >= 0 or None, got -1"),
    ({"prefetch_blocks": True}, "prefetch_blocks must be an int >= 0 or None, got True"),
    ({"batch_size": 0}, "batch_size must be >= 1 or None, got 0"),
    ({"batch_size": "4"}, "batch_size must be an int >= 1 or None, got '4'"),
    ({"read_threads": 0}, "read_threads must be >= 1 or None, got 0"),
    ({"read_threads": -2}, "read_threads must be >= 1 or None, got -2"),
    ({"max_pixels": -5}, "max_pixels must be >= 1 or None, got -5"),
    ({"max_pixels": 1e9}, "max_pixels must be an int >= 1 or None, got 1000000000.0"),
    ({"storage_options": {"retry_seconds": -1}}, "retry_seconds must be >= 0, got -1"),
    ({"storage_options": {"backoff": "fast"}}, "backoff must be a number >= 0, got 'fast'"),
    ({"storage_options": {"max_backoff": float("nan")}}, "max_backoff must be a number >= 0, got nan"),
    ({"storage_options": "retry"}, "storage_options must be a dict or None, got 'retry'"),
    ({"rank": 1}, "rank=1 needs world_size= (torch.distributed is not initialised, so the number of ranks is "
                  "not known)"),
    ({"world_size": 4}, "world_size=4 needs rank= (torch.distributed is not initialised, so this process's rank "
                        "is not known)"),
    ({"rank": 3, "world_size": 3}, "rank=3 is outside world_size=3 (ranks 0 to 2)"),
    ({"rank": -1, "world_size": 2}, "rank must be >= 0 or None, got -1"),
    ({"rank": 0, "world_size": 0}, "world_size must be >= 1 or None, got 0"),
    ({"rank": 0.0, "world_size": 2}, "rank must be an int >= 0 or None, got 0.0"),
    ({"drop_last": "yes"}, "drop_last must be True or False, got 'yes'"),
    ({"verify_reads": 1}, "verify_reads must be True or False, got 1"),
    ({"transform": "resize"}, "transform must be a callable or None, got 'resize'"),
    ({"collate_fn": None, "batch_size": 2}, "collate_fn must be a callable, got None"),
    ({"shuffle": "random"}, "shuffle must be one of ('corgipile', 'block', 'none', 'window', 'full'), got 'random'"),
    ({"decode": "jpeg"}, "decode must be None, a callable, or one of ['auto', 'pil', 'rgb', 'text', 'tokens', 'video'], "
                         "got 'jpeg'"),
    ({"on_error": "ignore"}, "on_error must be one of ('raise', 'skip'), got 'ignore'"),
    ({"on_error": "skip"}, "on_error='skip' needs batch_size=: a skipped sample leaves its batch one sample shorter, "
                           "so every rank keeps len(dataset) steps; without batches the epoch would be short"),
]


@pytest.mark.parametrize("arguments, message", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_by_name_before_any_read(tmp_path, arguments, message):
    """A pack that does not exist: the argument is refused first (a read would raise ManifestError)."""
    with pytest.raises(ArgumentError) as caught:
        CorgiPileDataset(tmp_path / "no-pack-here", **arguments)
    assert str(caught.value) == message
    assert isinstance(caught.value, CorgiError) and isinstance(caught.value, ValueError) \
        and isinstance(caught.value, TypeError)


def test_good_arguments_are_taken_in_their_plain_form(text_pack):
    dataset = CorgiPileDataset(text_pack, seed=np.int64(3), buffer_blocks=np.int32(2), read_threads=1,
                               max_pixels=None, drop_last=np.bool_(True), world_size=1,
                               storage_options={"retry_seconds": 0})
    assert (dataset.seed, dataset.buffer_blocks, dataset.prefetch_blocks) == (3, 2, 2)
    assert type(dataset.seed) is int and dataset.drop_last is True and (dataset.rank, dataset.world_size) == (0, 1)
    assert sorted(sample["key"] for sample in dataset) == [f"a/{i}" for i in range(4)]


def test_storage_options_are_checked_where_they_are_taken(tmp_path):
    from corgi_io.storage.http import HttpStorage
    from corgi_io.storage import open_storage

    with pytest.raises(ArgumentError, match="^open_retry_seconds must be >= 0, got -0.5$"):
        open_storage(str(tmp_path), open_retry_seconds=-0.5)  # local storage ignores them, but not wrong ones
    with pytest.raises(ArgumentError, match="^timeout must be > 0, got 0$"):
        HttpStorage("http://localhost:9", timeout=0)
    with pytest.raises(ArgumentError, match="^retry_seconds must be a number >= 0, got None$"):
        HttpStorage("http://localhost:9", retry_seconds=None)


def test_the_library_raises_argument_errors_for_bad_arguments():
    from corgi_io.formats import get_format
    from corgi_io.schedule import EpochSpec, block_order

    for call in (lambda: EpochSpec(0), lambda: EpochSpec(2, seed=-1), lambda: block_order(4, -1, 0),
                 lambda: get_format("zip")):
        with pytest.raises(ArgumentError):
            call()


def test_the_smallest_read_ahead_still_reads_every_sample(text_pack):
    dataset = CorgiPileDataset(text_pack, buffer_blocks=1, prefetch_blocks=0)
    assert sorted(sample["key"] for sample in dataset) == [f"a/{i}" for i in range(4)]

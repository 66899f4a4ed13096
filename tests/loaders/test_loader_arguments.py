"""The loaders refuse what cannot work, at once and in the user's words: no torch; each part of a
`CorgiPileDataset` (Shuffle, Ranks, Batches, Budget, TokenRows, Decoding, Reading, Cache, Blend) refuses a bad
argument of its own when it is made; what only the parts together can tell (`loaders/loader_spec.py:loader_spec`) is
refused when the dataset is built, before any read (so nothing fails later in DataLoader workers).  Every refusal is
one line, an ArgumentError that is also a ValueError and a TypeError."""
from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="pip install 'corgi-io[torch]'")

from corgi_io import ArgumentError, CorgiError, PackOptions, pack  # noqa: E402
from corgi_io.loaders import (Batches, Blend, Budget, Cache, CorgiPileDataset, Decoding, Ranks, Reading,  # noqa: E402
                              Shuffle, TokenRows)
from corgi_io.loaders.loader_spec import loader_spec  # noqa: E402
from helpers.corpus_factory import write_text  # noqa: E402

MISSING = "no-pack-here"  # a pack that does not exist: a refusal before any read, else ManifestError
ROW_TAKES = ("(it takes shuffle modes ('corgipile', 'block', 'none'), balance 'count' or 'size', and decode None "
             "or 'tokens')")


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


def refusal(call) -> str:
    """The message of the ArgumentError `call()` raises, checked to be one line and of every kind it promises."""
    with pytest.raises(ArgumentError) as caught:
        call()
    error = caught.value
    assert isinstance(error, CorgiError) and isinstance(error, ValueError) and isinstance(error, TypeError)
    assert "\n" not in str(error)
    return str(error)


# --- 1. each part refuses its own bad arguments when it is made ----------------------------------------

PART_REFUSALS = [
    (lambda: Shuffle("random"), "shuffle mode must be one of ('corgipile', 'block', 'none', 'window', 'full'), "
                                "got 'random'"),
    (lambda: Shuffle(buffer_blocks=0), "buffer_blocks must be >= 1, got 0"),
    (lambda: Shuffle(buffer_blocks=-3), "buffer_blocks must be >= 1, got -3"),
    (lambda: Shuffle(buffer_blocks=2.5), "buffer_blocks must be an int >= 1, got 2.5"),
    (lambda: Shuffle(buffer_blocks=None), "buffer_blocks must be an int >= 1, got None"),
    (lambda: Ranks(balance="fair"), "balance must be one of ('count', 'size', 'dynamic'), got 'fair'"),
    (lambda: Ranks(drop_last="yes"), "drop_last must be True or False, got 'yes'"),
    (lambda: Ranks(rank=-1, world_size=2), "rank must be >= 0 or None, got -1"),
    (lambda: Ranks(rank=3, world_size=3), "rank=3 is outside world_size=3 (ranks 0 to 2)"),
    (lambda: Decoding("jpeg"), "decode must be None, a callable, or one of ['auto', 'pil', 'rgb', 'text', 'tokens', "
                               "'video'], got 'jpeg'"),
    (lambda: Decoding({"jpg": 3}), "decode must be None, a callable, or one of ['auto', 'pil', 'rgb', 'text', "
                                   "'tokens', 'video'], got 3"),
    (lambda: Blend({"a": 3}), "Blend(sources=) maps distinct names to pack paths or URLs, got {'a': 3}"),
    (lambda: Blend({1: "/p", "1": "/q"}), "Blend(sources=) maps distinct names to pack paths or URLs, got "
                                          "{1: '/p', '1': '/q'}"),
    (lambda: Ranks(rank=0, world_size=0), "world_size must be >= 1 or None, got 0"),
    (lambda: Ranks(rank=0.0, world_size=2), "rank must be an int >= 0 or None, got 0.0"),
    (lambda: Ranks(partitions=[["shard-00000.tar"]]), "partitions must be a dict or None, got [['shard-00000.tar']]"),
    (lambda: Batches(0), "batch size must be >= 1, got 0"),
    (lambda: Batches("4"), "batch size must be an int >= 1, got '4'"),
    (lambda: Batches(None), "batch size must be an int >= 1, got None"),
    (lambda: Batches(2, collate_fn=None), "collate_fn must be a callable, got None"),
    (lambda: Batches(2, group_by_size=1), "group_by_size must be True or False, got 1"),
    (lambda: Budget(0), "budget limit must be >= 1, got 0"),
    (lambda: Budget(400, cost="max"), "budget cost must be one of ('padded', 'sum'), got 'max'"),
    (lambda: Budget(400, collate_fn="pad"), "collate_fn must be a callable, got 'pad'"),
    (lambda: TokenRows(0), "row length must be >= 1, got 0"),
    (lambda: TokenRows(8, batch_size=0), "batch_size must be >= 1 or None, got 0"),
    (lambda: TokenRows(8, eos_id=-1), "eos_id must be >= 0 or None, got -1"),
    (lambda: TokenRows(8, split_documents="no"), "split_documents must be True or False, got 'no'"),
    (lambda: TokenRows(8, pad_id=None), "pad_id must be an int >= 0, got None"),
    (lambda: Decoding("rgb", max_pixels=-5), "max_pixels must be >= 1 or None, got -5"),
    (lambda: Decoding("rgb", max_pixels=1e9), "max_pixels must be an int >= 1 or None, got 1000000000.0"),
    (lambda: Decoding("rgb", on_error="ignore"), "on_error must be one of ('raise', 'skip'), got 'ignore'"),
    (lambda: Reading(threads=0), "threads must be >= 1 or None, got 0"),
    (lambda: Reading(threads=-2), "threads must be >= 1 or None, got -2"),
    (lambda: Reading(prefetch_blocks=-1), "prefetch_blocks must be >= 0 or None, got -1"),
    (lambda: Reading(prefetch_blocks=True), "prefetch_blocks must be an int >= 0 or None, got True"),
    (lambda: Reading(verify=1), "verify must be True or False, got 1"),
    (lambda: Reading(storage_options="retry"), "storage_options must be a dict or None, got 'retry'"),
    (lambda: Cache(3, 1 << 20), "Cache folder must be a path, got 3"),
    (lambda: Cache("/cache", 0), "Cache limit (bytes) must be >= 1 or None, got 0"),
    (lambda: Cache("/cache", 1 << 20, policy="fifo"), "cache policy must be one of ('belady', 'lru'), got 'fifo'"),
    (lambda: Blend("/data/web"), "Blend(sources=) must be a non-empty mapping {name: pack}, got '/data/web'"),
    (lambda: Blend({}), "Blend(sources=) must be a non-empty mapping {name: pack}, got {}"),
    (lambda: Blend({"a": "p", "b": "q"}, weights=[1, -2]),
     "weights must be finite, non-negative and not all zero; got {'a': 1.0, 'b': -2.0}"),
    (lambda: Blend({"a": "p", "b": "q"}, weights={"a": 1}),
     "weights must name exactly the sources ['a', 'b']; got ['a']"),
    (lambda: Blend({"a": "p"}, samples_per_epoch=0), "samples_per_epoch must be >= 1 or None, got 0"),
    (lambda: Blend({"a": "p"}, samples_per_epoch="b"), "samples_per_epoch='b' names no source of ['a']"),
]


@pytest.mark.parametrize("make, message", PART_REFUSALS)
def test_each_part_refuses_its_own_bad_arguments_when_made(make, message):
    assert refusal(make) == message


# --- 2. what only the parts together tell: loader_spec, before any read -----------------------------------

def rows_refusal(what: str) -> str:
    return f"TokenRows packs token rows itself: it does not take {what} {ROW_TAKES}"


BALANCE_NEEDS = ("balances every step's batch inside CorgiPile buffers: it needs batching=Batches(...) or Budget(...) "
                 "and Shuffle('corgipile')")
GROUPING_NEEDS = ("Batches(group_by_size=True) groups each CorgiPile buffer's batches by size: it needs "
                  "Shuffle('corgipile') and Ranks(balance='count')")
BUDGET_NEEDS = ("Budget cuts each CorgiPile buffer into batches: it needs Shuffle('corgipile'), and does not combine "
                "with Ranks(partitions=)")
SKIP_NEEDS = ("Decoding(on_error='skip') needs batching=Batches(...) or Budget(...): a skipped sample leaves its batch "
              "one sample shorter, so every rank keeps len(dataset) steps")
NOT_FOR_A_BLEND = ("Ranks(partitions=) (which pins one pack's shards to ranks), Batches(group_by_size=True), Budget "
                   "and TokenRows do not apply to a Blend")
BLEND = Blend({"a": MISSING, "b": MISSING})
PINNED = Ranks(partitions={0: ["shard-00000.tar"]})

CROSS_REFUSALS = [
    ({"source": {"a": MISSING}}, "source must be a pack's path or URL, or a Blend({name: pack}), got {'a': "
                                 "'no-pack-here'}"),
    ({"source": 3}, "source must be a pack's path or URL, or a Blend({name: pack}), got 3"),
    ({"shuffle": "block"}, "shuffle= takes Shuffle, got 'block'"),
    ({"ranks": {"rank": 0}}, "ranks= takes Ranks, got {'rank': 0}"),
    ({"batching": 8}, "batching= takes Batches or Budget or TokenRows or None, got 8"),
    ({"reading": 2}, "reading= takes Reading, got 2"),
    ({"cache": "/cache"}, "cache= takes Cache or None, got '/cache'"),
    ({"transform": "resize"}, "transform must be a callable or None, got 'resize'"),
    ({"seed": "x"}, "seed must be an int >= 0, got 'x'"),
    ({"seed": None}, "seed must be an int >= 0, got None"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"seed": 1.7}, "seed must be an int >= 0, got 1.7"),
    ({"seed": True}, "seed must be an int >= 0, got True"),
    ({"ranks": Ranks(balance="size")}, f"Ranks(balance='size') {BALANCE_NEEDS}"),
    ({"ranks": Ranks(balance="dynamic")}, f"Ranks(balance='dynamic') {BALANCE_NEEDS}"),
    ({"ranks": Ranks(balance="size"), "batching": Batches(4), "shuffle": Shuffle("block")},
     f"Ranks(balance='size') {BALANCE_NEEDS}"),
    ({"batching": Batches(4, group_by_size=True), "shuffle": Shuffle("window")}, GROUPING_NEEDS),
    ({"batching": Batches(4, group_by_size=True), "ranks": Ranks(balance="size")}, GROUPING_NEEDS),
    ({"batching": Budget(400), "shuffle": Shuffle("none")}, BUDGET_NEEDS),
    ({"batching": Budget(400), "ranks": PINNED}, BUDGET_NEEDS),
    ({"decode": Decoding("text", on_error="skip")}, SKIP_NEEDS),
    ({"batching": TokenRows(8), "transform": len}, rows_refusal("a transform")),
    ({"batching": TokenRows(8), "ranks": Ranks(drop_last=True)}, rows_refusal("Ranks(drop_last=True)")),
    ({"batching": TokenRows(8), "ranks": PINNED}, rows_refusal("Ranks(partitions=)")),
    ({"batching": TokenRows(8), "cache": Cache("/cache", 1 << 20)}, rows_refusal("a Cache")),
    ({"batching": TokenRows(8), "decode": Decoding(on_error="skip")}, rows_refusal("Decoding(on_error='skip')")),
    ({"batching": TokenRows(8, batch_size=2), "ranks": Ranks(balance="dynamic")},
     rows_refusal("Ranks(balance='dynamic')")),
    ({"batching": TokenRows(8), "shuffle": Shuffle("window")}, rows_refusal("Shuffle('window')")),
    ({"batching": TokenRows(8), "shuffle": Shuffle("full")}, rows_refusal("Shuffle('full')")),
    ({"batching": TokenRows(8), "decode": "rgb"}, rows_refusal("decode 'rgb'")),
    ({"batching": TokenRows(8), "transform": len, "decode": "text"}, rows_refusal("a transform, decode 'text'")),
    ({"source": BLEND, "ranks": Ranks(partitions={0: []})}, NOT_FOR_A_BLEND),
    ({"source": BLEND, "batching": Batches(4, group_by_size=True)}, NOT_FOR_A_BLEND),
    ({"source": BLEND, "batching": Budget(400)}, NOT_FOR_A_BLEND),
    ({"source": BLEND, "batching": TokenRows(8)}, NOT_FOR_A_BLEND),
]


@pytest.mark.parametrize("parts, message", CROSS_REFUSALS)
def test_parts_that_do_not_go_together_are_refused_by_name_before_any_read(tmp_path, parts, message):
    parts = {"source": tmp_path / MISSING, **parts}
    assert refusal(lambda: CorgiPileDataset(parts.pop("source"), **parts)) == message


def test_the_spec_refuses_a_decoding_that_is_not_one():
    """The dataset makes a Decoding of a plain `decode=`; loader_spec, called on its own, checks it is one."""
    assert refusal(lambda: loader_spec(MISSING, shuffle=Shuffle(), seed=0, ranks=Ranks(), batching=None,
                                       decoding="rgb", transform=None, reading=Reading(), cache=None)) \
        == "decode= takes Decoding, got 'rgb'"


DATASET_REFUSALS = [  # what needs the dataset (torch.distributed, the decoders, the storage) to tell
    ({"decode": "jpeg"}, "decode must be None, a callable, or one of ['auto', 'pil', 'rgb', 'text', 'tokens', "
                         "'video'], got 'jpeg'"),
    ({"ranks": Ranks(rank=1)}, "rank=1 needs world_size= (torch.distributed is not initialised, so the number of "
                               "ranks is not known)"),
    ({"ranks": Ranks(world_size=4)}, "world_size=4 needs rank= (torch.distributed is not initialised, so this "
                                     "process's rank is not known)"),
    ({"reading": Reading(storage_options={"retry_seconds": -1})}, "retry_seconds must be >= 0, got -1"),
    ({"reading": Reading(storage_options={"backoff": "fast"})}, "backoff must be a number >= 0, got 'fast'"),
    ({"reading": Reading(storage_options={"max_backoff": float("nan")})}, "max_backoff must be a number >= 0, got nan"),
]


@pytest.mark.parametrize("parts, message", DATASET_REFUSALS)
def test_what_the_dataset_resolves_is_refused_by_name_before_any_read(tmp_path, parts, message):
    assert refusal(lambda: CorgiPileDataset(tmp_path / MISSING, **parts)) == message


def test_the_dataset_takes_at_most_twelve_parameters():
    assert len(inspect.signature(CorgiPileDataset).parameters) <= 12


def test_good_arguments_are_taken_in_their_plain_form(text_pack):
    dataset = CorgiPileDataset(text_pack, seed=np.int64(3), shuffle=Shuffle(buffer_blocks=np.int32(2)),
                               reading=Reading(threads=1, storage_options={"retry_seconds": 0}),
                               decode=Decoding(max_pixels=None), ranks=Ranks(drop_last=np.bool_(True), world_size=1))
    spec = dataset.spec
    assert (spec.seed, spec.buffer_blocks, spec.prefetch_blocks, spec.read_threads) == (3, 2, 2, 1)
    assert type(spec.seed) is int and type(spec.buffer_blocks) is int and spec.drop_last is True
    assert (dataset.rank, dataset.world_size) == (0, 1)
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
    dataset = CorgiPileDataset(text_pack, shuffle=Shuffle(buffer_blocks=1), reading=Reading(prefetch_blocks=0))
    assert sorted(sample["key"] for sample in dataset) == [f"a/{i}" for i in range(4)]


def test_a_part_cannot_change_after_it_is_checked_not_even_through_the_dict_it_was_given():
    """The parts are frozen all through: a dict passed in is copied, and the part's own mapping refuses writes."""
    given = {"headers": {"a": "1"}}
    reading = Reading(storage_options=given)
    given["endpoint_url"], given["headers"]["a"] = "http://elsewhere", "2"
    assert dict(reading.storage_options) == {"headers": {"a": "1"}}
    with pytest.raises(TypeError):
        reading.storage_options["endpoint_url"] = "http://elsewhere"
    with pytest.raises(TypeError):
        Blend({"x": "/p"}).sources["y"] = "/q"
    assert Ranks(partitions={0: ["s.tar"]}).partitions[0] == ("s.tar",)
    assert Reading() == Reading() and hash(Reading()) == hash(Reading())
    assert hash(Blend({"x": "/p"}, weights=[1])) == hash(Blend({"x": "/p"}, weights=[1]))

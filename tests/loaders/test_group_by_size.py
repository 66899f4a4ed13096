"""CorgiPileDataset(batching=Batches(B, group_by_size=True)): length-grouped batches keep the loader's guarantees
(every sample once, equal steps on every rank, exact resume) and pad less than size-balanced batches; bad
combinations are refused."""
from __future__ import annotations

import numpy as np
import pytest

from corgi_io import ArgumentError
from corgi_io.loaders import Batches, CorgiPileDataset, Ranks, Shuffle
from helpers.packs import text_pack


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """300 texts whose token counts (the sizes) are long-tailed."""
    lengths = np.minimum(np.random.default_rng(0).lognormal(np.log(20), 1.0, 300), 400).astype(int) + 1
    return text_pack(tmp_path_factory, "group", lengths, block_samples=10)


def padding_waste(batches) -> float:
    padded = sum(len(b["size"]) * int(b["size"].max()) for b in batches)
    return 1 - sum(int(b["size"].sum()) for b in batches) / padded


def test_grouped_batches_read_every_sample_once_with_equal_steps_and_pad_less(packed):
    ranks = [CorgiPileDataset(packed, ranks=Ranks(rank=r, world_size=2), batching=Batches(8, group_by_size=True))
             for r in range(2)]
    batches = [list(ds) for ds in ranks]
    assert [len(b) for b in batches] == [len(ranks[0])] * 2 == [19, 19]
    keys = [k for rank in batches for b in rank for k in b["key"]]
    assert sorted(keys) == sorted(ranks[0].manifest.keys())
    balanced = [list(CorgiPileDataset(packed, ranks=Ranks(rank=r, world_size=2), batching=Batches(8)))
                for r in range(2)]
    assert padding_waste(batches[0] + batches[1]) < 0.75 * padding_waste(balanced[0] + balanced[1])


def test_grouped_batches_resume_exactly(packed):
    options = {"batching": Batches(8, group_by_size=True), "seed": 4}
    whole = [list(b["key"]) for b in CorgiPileDataset(packed, **options)]
    first = CorgiPileDataset(packed, **options)
    it = iter(first)
    head = [list(next(it)["key"]) for _ in range(6)]
    resumed = CorgiPileDataset(packed, **options)
    resumed.load_state_dict(first.state_dict())
    assert head + [list(b["key"]) for b in resumed] == whole


@pytest.mark.parametrize("parts", [{"shuffle": Shuffle("block")}, {"ranks": Ranks(balance="size")}])
def test_grouping_needs_corgipile_batches_under_count_balance(packed, parts):
    with pytest.raises(ArgumentError, match=r"^Batches\(group_by_size=True\) groups .* needs Shuffle\('corgipile'\) "
                                            r"and Ranks\(balance='count'\)$"):
        CorgiPileDataset(packed, batching=Batches(8, group_by_size=True), **parts)


def test_grouping_cannot_be_written_without_batches():
    """group_by_size is an option of Batches alone: without a batch size there is nothing to group."""
    with pytest.raises(TypeError):
        Batches(group_by_size=True)
    with pytest.raises(ArgumentError, match="^group_by_size must be True or False, got 1$"):
        Batches(8, group_by_size=1)

"""CorgiPileDataset(batching=Budget(T)): batches within a size budget keep the loader's guarantees (equal steps on
every rank, `len` exact, every sample read, exact and elastic resume through StatefulDataLoader, workers), and bad
combinations are refused before any read."""
from __future__ import annotations

import numpy as np
import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io import ArgumentError
import torch

from corgi_io.errors import BatchError
from corgi_io.loaders import Batches, Blend, Budget, CorgiPileDataset, PadCollate, Ranks, Shuffle
from helpers.packs import text_pack

BUDGET = 400


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """300 texts whose sizes are long-tailed, a few above the budget."""
    lengths = np.minimum(np.random.default_rng(1).lognormal(np.log(15), 1.0, 300), 300).astype(int) + 1
    return text_pack(tmp_path_factory, "budget", lengths, block_samples=10)


def cost(batch, model: str) -> int:
    sizes = batch["size"]
    return int(sizes.sum()) if model == "sum" else len(sizes) * int(sizes.max())


@pytest.mark.parametrize("model", ["padded", "sum"])
def test_budgeted_batches_take_equal_steps_read_everything_and_stay_within_budget(packed, model):
    ranks = [CorgiPileDataset(packed, ranks=Ranks(balance="size", rank=r, world_size=3),
                              batching=Budget(BUDGET, cost=model))
             for r in range(3)]
    batches = [list(ds) for ds in ranks]
    assert [len(b) for b in batches] == [len(ranks[0])] * 3
    assert all(cost(b, model) <= BUDGET or len(b["size"]) == 1 for rank in batches for b in rank)
    keys = {k for rank in batches for b in rank for k in b["key"]}
    assert keys == set(ranks[0].manifest.keys())
    assert len({len(b["size"]) for rank in batches for b in rank}) > 1  # the batch size varies with the sizes


def test_a_dataloader_with_workers_steps_len_times(packed):
    ds = CorgiPileDataset(packed, seed=3, ranks=Ranks(rank=1, world_size=2), batching=Budget(BUDGET))
    whole = sorted(k for b in ds for k in b["key"])
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    got = list(loader)
    assert len(got) == len(loader) == len(ds)
    assert sorted(k for b in got for k in b["key"]) == whole


def keys_of(batches) -> list:
    return [list(b["key"]) for b in batches]


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_continues_exactly(packed, workers):
    options = {"batching": Budget(BUDGET), "seed": 4, "ranks": Ranks(balance="size", rank=0, world_size=2)}
    whole = keys_of(StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=workers))
    first = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=workers)
    it = iter(first)
    head = keys_of(next(it) for _ in range(5))
    state = first.state_dict()
    resumed = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    assert head + keys_of(resumed) == whole


def test_elastic_resume_reads_each_remaining_sample_once_with_equal_steps(packed):
    options = {"batching": Budget(BUDGET), "seed": 2}
    old = [CorgiPileDataset(packed, ranks=Ranks(rank=r, world_size=2), **options) for r in range(2)]
    its = [iter(ds) for ds in old]
    seen = {k for it in its for _ in range(4) for k in next(it)["key"]}
    state = old[0].state_dict()
    new = [CorgiPileDataset(packed, ranks=Ranks(rank=r, world_size=3), **options) for r in range(3)]
    for ds in new:
        ds.load_state_dict(state)
    rest = [list(ds) for ds in new]
    assert len({len(r) for r in rest}) == 1
    after = [k for r in rest for b in r for k in b["key"]]
    everything = set(new[0].manifest.keys())
    assert set(after) | seen == everything and not set(after) & seen
    assert len(after) - len(set(after)) < 3  # padding repeats at most W - 1 samples


def test_a_budget_and_a_batch_size_cannot_be_written_together():
    """One `batching=`: Batches(8) and Budget(T) at once is not expressible, and a Budget takes no size."""
    with pytest.raises(TypeError):
        Budget(BUDGET, size=8)


@pytest.mark.parametrize("parts, words", [
    ({"shuffle": Shuffle("block")}, r"Budget .* needs Shuffle\('corgipile'\)"),
    ({"ranks": Ranks(partitions={0: ["shard-00000.tar"]})}, r"Budget .* Ranks\(partitions=\)"),
])
def test_bad_budget_combinations_are_refused(packed, parts, words):
    with pytest.raises(ArgumentError, match=words):
        CorgiPileDataset(packed, batching=Budget(BUDGET), **parts)


def test_grouping_by_size_is_a_batches_option_a_budget_does_not_take():
    with pytest.raises(TypeError):
        Budget(BUDGET, group_by_size=True)
    assert Batches(8, group_by_size=True).group_by_size


@pytest.mark.parametrize("make, words", [
    (lambda: Budget(BUDGET, cost="max"), r"^budget cost must be one of \('padded', 'sum'\), got 'max'$"),
    (lambda: Budget(0), "^budget limit must be >= 1, got 0$"),
])
def test_bad_budget_options_are_refused(make, words):
    with pytest.raises(ArgumentError, match=words):
        make()


def test_a_blend_refuses_a_budget(packed):
    with pytest.raises(ArgumentError, match="Budget and TokenRows do not apply to a Blend"):
        CorgiPileDataset(Blend({"a": packed, "b": packed}), batching=Budget(BUDGET))


def test_pad_collate_pads_sequences_to_the_longest_with_a_mask(packed):
    def as_codes(text):  # a word's length as its "token id" (never 0, the pad id)
        return torch.tensor([len(word) % 90 + 1 for word in text.split()])

    ds = CorgiPileDataset(packed, batching=Budget(BUDGET, collate_fn=PadCollate(0)), decode="text",
                          transform=as_codes)
    for batch in ds:
        lengths = batch["mask"].sum(dim=1)
        assert batch["data"].shape == batch["mask"].shape and int(lengths.max()) == batch["data"].shape[1]
        assert (batch["data"][~batch["mask"]] == 0).all() and (batch["data"][batch["mask"]] > 0).all()
        assert len(batch["key"]) == len(batch["data"])
    with pytest.raises(BatchError, match="1-D"):
        PadCollate()([{"key": "a", "data": torch.zeros(2, 2)}])

"""CorgiPileDataset(batch_budget=T): batches within a size budget keep the loader's guarantees (equal steps on
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
from corgi_io.loaders import CorgiPileDataset, PadCollate
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
    ranks = [CorgiPileDataset(packed, batch_budget=BUDGET, batch_cost=model, balance="size", rank=r, world_size=3)
             for r in range(3)]
    batches = [list(ds) for ds in ranks]
    assert [len(b) for b in batches] == [len(ranks[0])] * 3
    assert all(cost(b, model) <= BUDGET or len(b["size"]) == 1 for rank in batches for b in rank)
    keys = {k for rank in batches for b in rank for k in b["key"]}
    assert keys == set(ranks[0].manifest.keys())
    assert len({len(b["size"]) for rank in batches for b in rank}) > 1  # the batch size varies with the sizes


def test_a_dataloader_with_workers_steps_len_times(packed):
    ds = CorgiPileDataset(packed, batch_budget=BUDGET, rank=1, world_size=2, seed=3)
    whole = sorted(k for b in ds for k in b["key"])
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    got = list(loader)
    assert len(got) == len(loader) == len(ds)
    assert sorted(k for b in got for k in b["key"]) == whole


def keys_of(batches) -> list:
    return [list(b["key"]) for b in batches]


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_continues_exactly(packed, workers):
    options = {"batch_budget": BUDGET, "seed": 4, "balance": "size", "rank": 0, "world_size": 2}
    whole = keys_of(StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=workers))
    first = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=workers)
    it = iter(first)
    head = keys_of(next(it) for _ in range(5))
    state = first.state_dict()
    resumed = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    assert head + keys_of(resumed) == whole


def test_elastic_resume_reads_each_remaining_sample_once_with_equal_steps(packed):
    options = {"batch_budget": BUDGET, "seed": 2}
    old = [CorgiPileDataset(packed, **options, rank=r, world_size=2) for r in range(2)]
    its = [iter(ds) for ds in old]
    seen = {k for it in its for _ in range(4) for k in next(it)["key"]}
    state = old[0].state_dict()
    new = [CorgiPileDataset(packed, **options, rank=r, world_size=3) for r in range(3)]
    for ds in new:
        ds.load_state_dict(state)
    rest = [list(ds) for ds in new]
    assert len({len(r) for r in rest}) == 1
    after = [k for r in rest for b in r for k in b["key"]]
    everything = set(new[0].manifest.keys())
    assert set(after) | seen == everything and not set(after) & seen
    assert len(after) - len(set(after)) < 3  # padding repeats at most W - 1 samples


@pytest.mark.parametrize("options, words", [
    ({"batch_size": 8}, "give one of them"),
    ({"shuffle": "block"}, "shuffle='corgipile'"),
    ({"group_by_size": True, "batch_size": None}, "group_by_size"),
    ({"batch_cost": "max"}, "batch_cost"),
    ({"batch_budget": 0}, "batch_budget"),
])
def test_bad_budget_options_are_refused(packed, options, words):
    with pytest.raises(ArgumentError, match=words):
        CorgiPileDataset(packed, **{"batch_budget": BUDGET, **options})


def test_a_blend_refuses_a_budget(packed):
    with pytest.raises(ArgumentError, match="batch_budget"):
        CorgiPileDataset({"a": packed, "b": packed}, batch_budget=BUDGET)


def test_pad_collate_pads_sequences_to_the_longest_with_a_mask(packed):
    def as_codes(text):  # a word's length as its "token id" (never 0, the pad id)
        return torch.tensor([len(word) % 90 + 1 for word in text.split()])

    ds = CorgiPileDataset(packed, batch_budget=BUDGET, decode="text", transform=as_codes, collate_fn=PadCollate(0))
    for batch in ds:
        lengths = batch["mask"].sum(dim=1)
        assert batch["data"].shape == batch["mask"].shape and int(lengths.max()) == batch["data"].shape[1]
        assert (batch["data"][~batch["mask"]] == 0).all() and (batch["data"][batch["mask"]] > 0).all()
        assert len(batch["key"]) == len(batch["data"])
    with pytest.raises(BatchError, match="1-D"):
        PadCollate()([{"key": "a", "data": torch.zeros(2, 2)}])

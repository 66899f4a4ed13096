"""CorgiPileDataset over a weighted blend of packs: every sample names its source, each epoch and each batch holds
the weights, sources repeat or continue across epochs, resume is exact and elastic, size balance keeps the samples,
and bad blends fail before any read.  The pure planning is property-tested in tests/schedule/test_blend_plan.py."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io import ArgumentError, PackOptions, pack
from corgi_io.loaders import Batches, Blend, CorgiPileDataset, Ranks, Shuffle
from corgi_io.manifest import open_manifest
from corgi_io.schedule.blend import epoch_quotas
from helpers.corpus_factory import make_image_corpus
from helpers.packs import text_pack

SIZES = {"web": 200, "code": 37, "books": 90}


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """name -> pack of text samples (blocks of 8): 200, 37 and 90 samples of varied lengths."""
    return {name: text_pack(tmp_path_factory, f"blend-{name}", [2 + (i * 7) % 29 for i in range(n)], stem=name)
            for name, n in SIZES.items()}


def two(packs) -> dict:
    return {"web": packs["web"], "code": packs["code"]}


def tags(samples) -> list:
    """'source:key' of each sample (a dict) or of each row of a collated batch."""
    if isinstance(samples, dict):
        return [f"{s}:{k}" for s, k in zip(samples["source"], samples["key"])]
    return [f"{s['source']}:{s['key']}" for s in samples]


def test_every_sample_names_its_source_and_keeps_its_own_packs_index(packs):
    ds = CorgiPileDataset(Blend(packs, weights={"web": 0.5, "code": 0.25, "books": 0.25}, samples_per_epoch=400))
    manifests = {name: open_manifest(root) for name, root in packs.items()}
    samples = list(ds)
    assert len(samples) == len(ds) == 400
    for sample in samples:
        assert sample["key"] == manifests[sample["source"]].key(sample["index"])


@pytest.mark.parametrize("world", [1, 2, 3])
def test_each_epoch_gives_every_source_its_weight_within_half_a_percent(packs, world):
    weights, n = {"web": 0.6, "code": 0.3, "books": 0.1}, 3000
    ranks = [CorgiPileDataset(Blend(packs, weights=weights, samples_per_epoch=n),
                              ranks=Ranks(rank=r, world_size=world))
             for r in range(world)]
    counts = Counter(s["source"] for ds in ranks for s in ds)
    total = sum(counts.values())
    assert len({len(ds) for ds in ranks}) == 1 and total == world * len(ranks[0])
    for name, w in weights.items():
        assert abs(counts[name] / total - w) <= 0.005, (name, counts)


@pytest.mark.parametrize("batch_size, world", [(16, 1), (10, 2), (7, 3)])
def test_every_batch_holds_each_source_within_one_sample_of_its_share(packs, batch_size, world):
    weights = {"web": 0.6, "code": 0.3, "books": 0.1}
    for rank in range(world):
        ds = CorgiPileDataset(Blend(packs, weights=weights, samples_per_epoch=1000),
                              ranks=Ranks(drop_last=True, rank=rank, world_size=world), batching=Batches(batch_size))
        batches = list(ds)
        assert len(batches) == len(ds)
        for batch in batches:
            held = Counter(batch["source"])
            assert all(abs(held[name] - w * batch_size) <= 1 for name, w in weights.items()), held


def test_a_small_source_repeats_whole_passes_and_a_large_one_continues_next_epoch(packs):
    # 370 a epoch at 0.7/0.3: code gives 111 = three passes of its 37; web gives 259 of its 200
    ds = CorgiPileDataset(Blend(two(packs), weights={"web": 0.7, "code": 0.3}, samples_per_epoch=370))
    seen = Counter()
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = Counter(tags(ds))
        code = Counter({k: v for k, v in got.items() if k.startswith("code:")})
        assert len(code) == 37 and set(code.values()) == {3}  # each pass once: every code sample 3 times
        seen.update(k for k in got.elements() if k.startswith("web:"))
    # two epochs: 518 of web's stream = two whole passes and 118 of the third, each sample once per pass
    assert len(seen) == 200 and Counter(seen.values()) == Counter({2: 82, 3: 118})


@pytest.mark.parametrize("shuffle", ["corgipile", "block", "none", "window", "full"])
def test_every_shuffle_reads_the_quotas(packs, shuffle):
    weights = np.array([0.5, 0.3, 0.2])
    ds = CorgiPileDataset(Blend(packs, weights=weights.tolist(), samples_per_epoch=500), shuffle=Shuffle(shuffle),
                          seed=3)
    counts = Counter(s["source"] for s in ds)
    assert [counts[name] for name in packs] == epoch_quotas(weights, 500).tolist()


def test_without_weights_a_blend_reads_each_pack_once_per_epoch(packs):
    ds = CorgiPileDataset(Blend(packs))
    assert Counter(tags(ds)) == Counter({f"{name}:{key}": 1 for name, root in packs.items()
                                         for key in open_manifest(root).keys()})


def test_samples_per_epoch_may_name_the_source_read_once_per_epoch(packs):
    ds = CorgiPileDataset(Blend(two(packs), weights={"web": 0.5, "code": 0.5}, samples_per_epoch="web"))
    got = Counter(s["source"] for s in ds)
    assert got == {"web": 200, "code": 200}


def test_size_balance_reads_the_same_samples_with_equal_steps(packs):
    blend = Blend(packs, weights={"web": 0.6, "code": 0.3, "books": 0.1}, samples_per_epoch=600)
    read = {}
    for balance in ("count", "size"):
        ranks = [CorgiPileDataset(blend, ranks=Ranks(balance=balance, rank=r, world_size=2), batching=Batches(8))
                 for r in range(2)]
        assert len({len(ds) for ds in ranks}) == 1
        batches = [list(ds) for ds in ranks]
        assert [len(b) for b in batches] == [len(ranks[0])] * 2
        read[balance] = Counter(t for rank in batches for batch in rank for t in tags(batch))
    assert read["size"] == read["count"]


def loader(ds, workers: int):
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers)


def resumed_twice(packs, workers: int, options: dict) -> tuple:
    """(an epoch's batches, the same epoch stopped after 7 batches, resumed, stopped after 5 more, resumed) of the
    blend of `two` with weights 0.7 and 0.3 and 300 samples per epoch, and the dataset's other `options`."""
    def fresh():
        ds = CorgiPileDataset(Blend(two(packs), weights={"web": 0.7, "code": 0.3}, samples_per_epoch=300), **options)
        ds.set_epoch(1)
        return loader(ds, workers)

    whole = [tags(b) for b in fresh()]
    got, state = [], None
    for steps in (7, 5, None):
        dl = fresh()
        if state is not None:
            dl.load_state_dict(state)
        it = iter(dl)
        for i, batch in enumerate(it):
            got.append(tags(batch))
            if i + 1 == steps:
                break
        state = dl.state_dict()
    return whole, got


@pytest.mark.parametrize("options", [{"batching": Batches(10)},
                                     {"batching": Batches(6), "ranks": Ranks(balance="size")},
                                     {"shuffle": Shuffle("window")}])
def test_a_blend_resumes_exactly_twice_in_a_row(packs, options):
    whole, got = resumed_twice(packs, 0, options)
    assert got == whole


@pytest.mark.slow
def test_a_blend_resumes_exactly_with_workers(packs):
    whole, got = resumed_twice(packs, 2, {"batching": Batches(10)})
    assert got == whole


def run_world(packs, world: int, batches: int | None, saved=None) -> tuple:
    """Each rank's batches of 8 (all, or its first `batches`) of epoch 1 of a blend of `packs` with weights 0.6,
    0.3 and 0.1 and 500 samples per epoch, and rank 0's state."""
    out, state = [], None
    blend = Blend(packs, weights={"web": 0.6, "code": 0.3, "books": 0.1}, samples_per_epoch=500)
    for rank in range(world):
        ds = CorgiPileDataset(blend, ranks=Ranks(rank=rank, world_size=world), batching=Batches(8))
        ds.set_epoch(1)
        if saved is not None:
            ds.load_state_dict(saved)
        dl = loader(ds, 0)
        got = []
        for i, batch in enumerate(dl):
            got.append(tags(batch))
            if batches is not None and i + 1 == batches:
                break
        state = dl.state_dict() if rank == 0 else state
        out.append(got)
    return out, state


@pytest.mark.parametrize("old, new", [(2, 3), (3, 1)])
def test_elastic_resume_of_a_blend_misses_nothing_and_keeps_steps_equal(packs, old, new):
    before, saved = run_world(packs, old, 6)
    after, _ = run_world(packs, new, None, saved=saved)
    whole, _ = run_world(packs, 1, None)
    epoch = Counter(t for rank in whole for batch in rank for t in batch)
    done = Counter(t for rank in before + after for batch in rank for t in batch)
    assert not epoch - done                                   # every read of the epoch happened
    assert sum((done - epoch).values()) < len(packs) * max(old, new)  # the rest is padding: under a sample per rank
    assert len({len(rank) for rank in after}) == 1            # equal steps on every new rank


@pytest.mark.parametrize("kwargs, words", [
    ({"weights": {"web": -1, "code": 1}}, "non-negative"),
    ({"weights": {"web": 0, "code": 0}}, "not all zero"),
    ({"weights": {"web": 1}}, "exactly the sources"),
    ({"samples_per_epoch": 0}, "samples_per_epoch"),
    ({"samples_per_epoch": "nope"}, "names no source"),
])
def test_a_bad_blend_is_refused_when_made(packs, kwargs, words):
    with pytest.raises(ArgumentError, match=words):
        Blend(two(packs), **kwargs)


@pytest.mark.parametrize("parts", [{"ranks": Ranks(partitions={0: []})},
                                   {"batching": Batches(4, group_by_size=True)}])
def test_options_of_one_pack_are_refused_with_a_blend_before_any_read(packs, parts):
    with pytest.raises(ArgumentError, match="do not apply to a Blend"):
        CorgiPileDataset(Blend(two(packs)), **parts)


def test_weights_are_checked_before_any_manifest_is_opened(tmp_path):
    with pytest.raises(ArgumentError, match="non-negative"):
        CorgiPileDataset(Blend({"a": tmp_path / "missing-a", "b": tmp_path / "missing-b"}, weights=[1, -2]))


def test_a_blend_of_one_path_is_refused(packs):
    with pytest.raises(ArgumentError, match="mapping"):
        CorgiPileDataset(Blend(packs["web"], weights=[1]))


def test_sources_that_decode_to_different_kinds_cannot_share_default_batches(packs, tmp_path):
    make_image_corpus(tmp_path / "images", 12, long_tail=False)
    pack(tmp_path / "images", tmp_path / "image-pack", PackOptions(block_samples=4), progress=False)
    sources = Blend({"images": tmp_path / "image-pack", "text": packs["code"]})
    with pytest.raises(ArgumentError, match="different kinds"):
        CorgiPileDataset(sources, batching=Batches(4), decode="auto")
    raw = CorgiPileDataset(sources, batching=Batches(4))  # bytes batch together; so do decoded samples one by one
    assert sum(len(batch["key"]) for batch in raw) == 49
    assert {type(s["data"]).__name__ for s in CorgiPileDataset(sources, decode="auto")} == {"Tensor", "str"}


def test_a_blend_pickles_for_spawn_workers_after_it_has_iterated(packs):
    import pickle

    ds = CorgiPileDataset(Blend(two(packs), weights=[0.6, 0.4], samples_per_epoch=120),
                          ranks=Ranks(balance="dynamic"), batching=Batches(6))
    ds.set_epoch(2)
    first = [tags(batch) for batch in ds]
    copy = pickle.loads(pickle.dumps(ds))
    assert [tags(batch) for batch in copy] == first and len(copy) == len(first) == 20


@pytest.mark.slow
def test_persistent_workers_read_each_new_epoch_of_a_blend(packs):
    ds = CorgiPileDataset(Blend(two(packs), weights=[0.5, 0.5], samples_per_epoch=100), batching=Batches(10))
    dl = StatefulDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        got = sorted(t for batch in dl for t in tags(batch))
        fresh = CorgiPileDataset(Blend(two(packs), weights=[0.5, 0.5], samples_per_epoch=100), batching=Batches(10))
        fresh.set_epoch(epoch)
        assert got == sorted(t for batch in fresh for t in tags(batch))


def test_a_pack_with_a_field_named_source_is_refused_in_a_blend(packs, tmp_path):
    """A blend sets `source` on every sample; a pack made before pack time reserved that name, holding such a field,
    would lose it silently: the blend refuses it in one line, naming the source."""
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(packs["code"], old)
    head = json.loads((old / "manifest.json").read_text())
    head["fields"], head["max_fields"] = head["fields"] + ["source"], 2  # as an old pack with a .source member
    (old / "manifest.json").write_text(json.dumps(head))
    assert "source" in open_manifest(old).fields
    with pytest.raises(ArgumentError, match=r"\['old'\] have a field named 'source'"):
        CorgiPileDataset(Blend({"web": packs["web"], "old": old}))
    CorgiPileDataset(Blend({"web": packs["web"], "code": packs["code"]}))  # the same pack without it blends

"""DataLoader(persistent_workers=True) follows set_epoch: epochs and dynamic-balance cost models.

Workers that live across epochs keep their copy of the dataset, so set_epoch reaches them
through shared memory (corgi_io/loaders/shared_epoch.py).  Persistent loaders under fork and
spawn yield, epoch by epoch, exactly what a fresh loader per epoch yields; with
balance="dynamic", two real gloo ranks agree on a cost model at set_epoch and the persistent
workers plan with it.
"""
from __future__ import annotations

import copy
import json
import multiprocessing
import pickle
from itertools import zip_longest

import pytest
import torch

from corgi_io.loaders import Batches, CorgiPileDataset, Ranks, Shuffle
from corgi_io.loaders.shared_epoch import SharedEpoch
from corgi_io import PackOptions, pack
from helpers.corpus_factory import write_text

EPOCHS = 3
WORKERS = 2


@pytest.fixture(scope="module")
def text_pack(tmp_path_factory):
    """45 texts of very different sizes in 3 classes, blocks of 4: many blocks, sizes that matter to balance."""
    root = tmp_path_factory.mktemp("persistent")
    for i in range(45):
        write_text(root / "corpus" / f"class{i % 3}" / f"t{i:02d}.txt", n_tokens=20 + (i * 37) % 400, seed=i)
    pack(root / "corpus", root / "pack", PackOptions(block_samples=4), workers=1, progress=False)
    return root / "pack"


def dataset(path) -> CorgiPileDataset:
    return CorgiPileDataset(path, shuffle=Shuffle(buffer_blocks=2), seed=7, ranks=Ranks(rank=1, world_size=2))


def epoch_keys(loader) -> list:
    return [sample["key"] for sample in loader]


def fresh_loader_epochs(path) -> list:
    """Per epoch, the keys of a new (non-persistent) DataLoader: the behaviour persistent workers must match."""
    ds, epochs = dataset(path), []
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        epochs.append(epoch_keys(torch.utils.data.DataLoader(ds, num_workers=WORKERS, batch_size=None, timeout=60)))
    return epochs


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_persistent_workers_yield_each_epoch_set_after_they_started(text_pack, start_method):
    expected = fresh_loader_epochs(text_pack)
    assert len({tuple(keys) for keys in expected}) == EPOCHS  # the epochs differ, so a stale worker shows
    ds = dataset(text_pack)
    loader = torch.utils.data.DataLoader(ds, num_workers=WORKERS, batch_size=None, timeout=60,
                                         persistent_workers=True, multiprocessing_context=start_method)
    got = []
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        got.append(epoch_keys(loader))
    worker_pids = {w.pid for w in loader._iterator._workers}
    assert got == expected
    assert len(worker_pids) == WORKERS  # the same two workers served every epoch


@pytest.mark.slow
def test_an_epoch_given_before_the_workers_start_is_kept_until_set_epoch(text_pack):
    """A copy keeps a value set on its own (as a restored state does) until the main process publishes again."""
    expected = fresh_loader_epochs(text_pack)
    ds = dataset(text_pack)
    ds.epoch = 2
    loader = torch.utils.data.DataLoader(ds, num_workers=WORKERS, batch_size=None, timeout=60,
                                         persistent_workers=True)
    assert epoch_keys(loader) == expected[2]
    ds.set_epoch(1)
    assert epoch_keys(loader) == expected[1]


def test_shared_epoch_hands_a_copy_only_what_was_published_since_it_last_looked():
    main = SharedEpoch(world_size=2)
    worker = copy.copy(main)  # the same shared tensors, its own bookkeeping: a fork worker's view
    assert worker.latest(5, None) == (5, None)  # nothing published: the copy's own values stand
    main.publish(3, [[1.5, 0.25], [3.0, 0.5]])
    assert main.latest(3, "mine") == (3, "mine")  # the publisher holds what it published
    assert worker.latest(5, None) == (3, [[1.5, 0.25], [3.0, 0.5]])
    assert worker.latest(9, None) == (9, None)  # already taken: no news until the next publish
    main.publish(4, None)
    assert worker.latest(3, [[1.5, 0.25], [3.0, 0.5]]) == (4, None)
    detached = pickle.loads(pickle.dumps(main))  # a plain pickle copies the values
    main.publish(6, None)
    assert detached.latest(4, None) == (4, None)
    with pytest.raises(ValueError):
        main.publish(7, [[1.0, 0.0]])  # one (a, b) per rank


def test_a_pickled_or_deep_copied_dataset_plans_the_same_and_is_independent(text_pack):
    ds = dataset(text_pack)
    ds.set_epoch(2)
    twins = pickle.loads(pickle.dumps(ds)), copy.deepcopy(ds)  # before ds iterates (its reader holds threads)
    before = epoch_keys(ds)
    for twin in twins:
        assert epoch_keys(twin) == before
        twin.set_epoch(0)
        assert epoch_keys(twin) != before
    assert epoch_keys(ds) == before


def interleave(*streams) -> list:
    """Round-robin over the workers' streams, as the DataLoader yields them."""
    return [x for group in zip_longest(*streams) for x in group if x is not None]


def planned_keys(ds) -> list:
    """This rank's epoch as the main process plans it: the workers' plans (in batches of the dataset's
    `batch_size`, else one by one), interleaved."""
    step = ds.spec.batch_size or 1
    streams = ([ds.manifest.key(i) for _, order in ds.plan(w, WORKERS) for i in order.tolist()] for w in range(WORKERS))
    batches = interleave(*([keys[i:i + step] for i in range(0, len(keys), step)] for keys in streams))
    return [key for batch in batches for key in batch]


def dynamic_rank(path, rendezvous, rank: int, out) -> None:
    """One of two gloo ranks: an epoch, made-up step times (rank 1 is twice as slow), then a dynamic epoch."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    ds = CorgiPileDataset(path, shuffle=Shuffle(buffer_blocks=2), seed=7, ranks=Ranks(balance="dynamic"),
                          batching=Batches(4))
    loader = torch.utils.data.DataLoader(ds, num_workers=WORKERS, batch_size=None, timeout=60,
                                         persistent_workers=True)
    ds.set_epoch(0)  # no steps measured yet: static size balance
    for batch in loader:
        sizes = batch["size"].tolist()
        ds.observe((rank + 1) * (1e-6 * sum(sizes) + 1e-3 * len(sizes)), sizes)
    ds.set_epoch(1)  # the ranks agree on both cost models
    got = [key for batch in loader for key in batch["key"]]
    report = {"cost_model": ds.cost_model, "got": got, "planned": planned_keys(ds)}
    ds.cost_model = None
    report["static"] = planned_keys(ds)
    out.write_text(json.dumps(report))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_persistent_workers_plan_with_the_cost_model_agreed_at_set_epoch(text_pack, tmp_path):
    fork = multiprocessing.get_context("fork")
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    ranks = [fork.Process(target=dynamic_rank, args=(text_pack, tmp_path / "rendezvous", r, outs[r]))
             for r in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
    assert [p.exitcode for p in ranks] == [0, 0]
    reports = [json.loads(out.read_text()) for out in outs]
    assert reports[0]["cost_model"] == reports[1]["cost_model"] is not None
    assert reports[0]["cost_model"][1][0] == pytest.approx(2 * reports[0]["cost_model"][0][0])
    for report in reports:
        assert report["planned"] != report["static"]  # the cost model changes this rank's share
        assert report["got"] == report["planned"]

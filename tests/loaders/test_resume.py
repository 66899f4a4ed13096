"""Mid-epoch and elastic resume of CorgiPileDataset through torchdata's StatefulDataLoader (exact resume,
in-process and in a new process) and simulated worlds that change size (elastic resume).  The pure
properties of the resume core are in tests/schedule/test_resume_core.py."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io import ResumeError
from corgi_io.loaders import Batches, CorgiPileDataset, Ranks, Shuffle
from corgi_io import PackOptions, pack
from helpers.corpus_factory import write_text
from helpers.packs import text_pack


# --- CorgiPileDataset through StatefulDataLoader -----------------------------------------------------

@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return text_pack(tmp_path_factory, "resume", [3 + i % 17 for i in range(150)], classes=3)


def keys_of(batch) -> list:
    return list(batch["key"])


def loader(ds, workers: int, batch: int = 4, cls=StatefulDataLoader):
    """Batches of 4: the dataset's own (batch mode, collate_samples) or the DataLoader's over samples."""
    if ds.spec.batch_size is not None:
        return cls(ds, batch_size=None, num_workers=workers)
    return cls(ds, batch_size=batch, num_workers=workers,
               collate_fn=lambda samples: {"key": [s["key"] for s in samples]})


def batches_after(root, saved, n_skip, workers, epoch=1, **options) -> tuple:
    """(all batches of an uninterrupted epoch, batches after restoring `saved` into a new loader)."""
    ds = CorgiPileDataset(root, **options)
    ds.set_epoch(epoch)
    whole = [keys_of(b) for b in loader(ds, workers)]
    fresh = CorgiPileDataset(root, **options)
    fresh.set_epoch(epoch)
    resumed_loader = loader(fresh, workers)
    resumed_loader.load_state_dict(saved)
    return whole, [keys_of(b) for b in resumed_loader]


def state_after(root, n: int, workers: int, epoch=1, **options) -> dict:
    ds = CorgiPileDataset(root, **options)
    ds.set_epoch(epoch)
    it = loader(ds, workers)
    for i, _ in enumerate(it):
        if i + 1 == n:
            return it.state_dict()
    raise AssertionError("the epoch is shorter than n batches")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("options", [{}, {"batching": Batches(4)}, {"shuffle": Shuffle("window")},
                                     {"shuffle": Shuffle("full")},
                                     {"shuffle": Shuffle("window"), "batching": Batches(4)}])
def test_exact_resume_yields_the_same_remaining_batches(packed, workers, options):
    for n in (1, 9, 19):
        saved = state_after(packed, n, workers, **options)
        json.dumps(saved)  # small JSON data: no arrays, no pickled objects
        whole, resumed = batches_after(packed, saved, n, workers, **options)
        assert resumed == whole[n:], (n, workers, options)


def test_a_state_saved_at_the_end_of_an_epoch_resumes_to_nothing_then_the_next_epoch_is_whole(packed):
    ds = CorgiPileDataset(packed)
    ds.set_epoch(3)
    it = loader(ds, 0)
    everything = [keys_of(b) for b in it]
    saved = it.state_dict()
    again = CorgiPileDataset(packed)
    again.set_epoch(3)
    resumed = loader(again, 0)
    resumed.load_state_dict(saved)
    assert [keys_of(b) for b in resumed] == []
    again.set_epoch(4)
    assert sum(len(keys_of(b)) for b in loader(again, 0)) == sum(len(b) for b in everything)


@pytest.mark.slow
def test_resume_in_a_new_process(packed, tmp_path):
    saved = state_after(packed, 7, 2, batching=Batches(4))
    (tmp_path / "state.json").write_text(json.dumps(saved))
    script = f"""
import json, sys
from torchdata.stateful_dataloader import StatefulDataLoader
from corgi_io.loaders import Batches, CorgiPileDataset
ds = CorgiPileDataset({str(packed)!r}, batching=Batches(4))
ds.set_epoch(1)
loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
loader.load_state_dict(json.load(open({str(tmp_path / 'state.json')!r})))
print(json.dumps([b["key"] for b in loader]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    whole, _ = batches_after(packed, saved, 7, 2, batching=Batches(4))
    assert json.loads(out.stdout) == whole[7:]


@pytest.mark.parametrize("change,words", [({"seed": 1}, "seed"),
                                          ({"shuffle": Shuffle("block"), "batching": None}, "shuffle"),
                                          ({"batching": Batches(8)}, "batch_size"),
                                          ({"shuffle": Shuffle(buffer_blocks=4)}, "buffer_blocks")])
def test_a_mismatched_state_is_refused(packed, change, words):
    saved = state_after(packed, 3, 0, batching=Batches(4))
    ds = CorgiPileDataset(packed, **{"batching": Batches(4), **change})
    with pytest.raises(ResumeError, match=words):
        ds.load_state_dict(saved)


def test_a_state_of_another_pack_is_refused(packed, tmp_path):
    saved = state_after(packed, 3, 0)
    source = tmp_path / "other"
    write_text(source / "a.txt", 5)
    other = tmp_path / "other-pack"
    pack(source, other, PackOptions(), progress=False)
    with pytest.raises(ResumeError, match="pack"):
        CorgiPileDataset(other).load_state_dict(saved)


# --- elastic: another world size or worker count ----------------------------------------------------

def run_world(root, world: int, workers: int, batches: int | None, saved=None, epoch=2, **options):
    """Each rank's yielded keys (all of them, or its first `batches` batches) and rank 0's loader state."""
    keys, state = [], None
    for rank in range(world):
        ds = CorgiPileDataset(root, ranks=Ranks(rank=rank, world_size=world), **options)
        ds.set_epoch(epoch)
        if saved is not None:
            ds.load_state_dict(saved)
        it = loader(ds, workers)
        got = []
        for i, batch in enumerate(it):
            got.append(keys_of(batch))
            if batches is not None and i + 1 == batches:
                break
        if rank == 0:
            state = it.state_dict()
        keys.append(got)
    return keys, state


@pytest.mark.slow
@pytest.mark.parametrize("old,new", [((2, 2), (3, 2)), ((4, 2), (2, 0)), ((3, 2), (3, 0)), ((2, 0), (3, 2))])
@pytest.mark.parametrize("options", [{}, {"batching": Batches(4)},
                                     {"batching": Batches(4), "shuffle": Shuffle("block")}])
def test_elastic_resume_yields_every_remaining_sample_once_with_equal_steps(packed, old, new, options):
    (w0, k0), (w1, k1) = old, new
    before, saved = run_world(packed, w0, k0, 5, **options)
    after, _ = run_world(packed, w1, k1, None, saved=saved, **options)
    consumed = Counter(k for rank in before for batch in rank for k in batch)
    remaining = Counter(k for rank in after for batch in rank for k in batch)
    everything = set(CorgiPileDataset(packed).manifest.keys())
    assert set(consumed) | set(remaining) == everything           # nothing lost
    assert not set(consumed) & set(remaining)                    # nothing the old world yielded comes back
    assert sum(remaining.values()) - len(remaining) < w1          # padding repeats fewer than one sample per rank
    assert len({sum(len(b) for b in rank) for rank in after}) == 1  # equal samples per new rank
    assert len({len(rank) for rank in after}) == 1                 # and equal batches: no rank can hang DDP


def test_a_dataset_that_iterated_still_pickles_for_spawn_workers(packed):
    import pickle

    ds = CorgiPileDataset(packed)
    first = [s["key"] for s in ds]
    copy = pickle.loads(pickle.dumps(ds))
    assert [s["key"] for s in copy] == first


@pytest.mark.slow
def test_a_state_saved_before_the_resumed_epoch_runs_keeps_the_resume_point(packed):
    before, saved = run_world(packed, 2, 2, 5)
    ds = CorgiPileDataset(packed, ranks=Ranks(rank=0, world_size=3))
    ds.load_state_dict(saved)
    again = CorgiPileDataset(packed, ranks=Ranks(rank=0, world_size=3))
    again.load_state_dict(json.loads(json.dumps(ds.state_dict())))  # checkpointed again before any step
    assert [s["key"] for s in again] == [s["key"] for s in ds]

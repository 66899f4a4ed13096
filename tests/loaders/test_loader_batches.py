"""Batch mode of CorgiPileDataset through real DataLoaders: len(loader) is the number of batches that come
out, every rank steps the same number of times, every sample comes once (up to the ranks' padding), and
raw bytes and decoded images come out collated."""
from collections import Counter

import numpy as np
import pytest
import torch

from corgi_io import BatchError, PackOptions, pack
from corgi_io.loaders import Batch, Batches, CorgiPileDataset, PackedBytes, Ranks, Shuffle
from helpers.corpus_factory import write_text
from helpers.packs import image_pack

N_TEXTS = 200
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on a 2-core machine


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    source = tmp_path_factory.mktemp("batch-corpus")
    for i in range(N_TEXTS):
        write_text(source / f"c{i % 3}" / f"t{i:03d}.txt", 2 + i % 23, seed=i)
    root = tmp_path_factory.mktemp("batches") / "pack"
    pack(source, root, PackOptions(block_samples=8), progress=False)
    return root


def run_ranks(root, world: int, workers: int, batch_size: int, shuffle: str = "corgipile", drop_last: bool = False):
    """Per rank: (len(loader), the batches' key lists) of one epoch, each rank with its own loader."""
    out, balance = [], "size" if shuffle == "corgipile" else "count"  # size needs corgipile
    for rank in range(world):
        ds = CorgiPileDataset(root, shuffle=Shuffle(shuffle), batching=Batches(batch_size),
                              ranks=Ranks(rank=rank, world_size=world, balance=balance, drop_last=drop_last))
        ds.set_epoch(1)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, timeout=60 if workers else 0)
        out.append((len(loader), [list(batch["key"]) for batch in loader]))
    return out


def check_epoch(ranks, world: int, batch_size: int, drop_last: bool = False):
    per_rank = -(-N_TEXTS // world) if not drop_last else N_TEXTS // world
    for length, batches in ranks:
        assert length == len(batches) == (per_rank // batch_size if drop_last else -(-per_rank // batch_size))
        assert all(len(b) == batch_size for b in batches[:-1])  # only each rank's last batch may be short
        assert sum(map(len, batches)) == (length * batch_size if drop_last else per_rank)
    assert len({len(batches) for _, batches in ranks}) == 1      # equal steps: DDP cannot hang
    seen = Counter(k for _, batches in ranks for b in batches for k in b)
    if drop_last:
        assert max(seen.values()) == 1                           # nothing repeats; the tails are dropped
    else:
        assert len(seen) == N_TEXTS and sum(seen.values()) - N_TEXTS == world * per_rank - N_TEXTS  # padding only


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("batch_size", [1, 7, 32])
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_len_is_the_batches_that_come_out_on_every_rank(texts, workers, batch_size, world):
    check_epoch(run_ranks(texts, world, workers, batch_size), world, batch_size)


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["block", "window", "none", "full"])
def test_every_shuffle_mode_batches_with_a_true_len(texts, shuffle):
    check_epoch(run_ranks(texts, 3, 2, 7, shuffle=shuffle), 3, 7)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 3])
def test_drop_last_drops_each_ranks_partial_batch(texts, workers):
    check_epoch(run_ranks(texts, 3, workers, 7, drop_last=True), 3, 7, drop_last=True)


def test_the_worker_split_is_whole_batches_but_one(texts):
    ds = CorgiPileDataset(texts, batching=Batches(32))  # 200 samples, 7 batches: 3 workers take 3, 2 and 2
    counts = [int((p[:, 2] - p[:, 1]).sum()) for p in (ds.worker_pieces(k, 3) for k in range(3))]
    assert counts == [96 - 24, 64, 64] and len(ds) == 7


@pytest.mark.slow
def test_raw_bytes_cross_two_workers_as_one_buffer(texts):
    expected = {s["key"]: s["data"] for s in CorgiPileDataset(texts)}
    ds = CorgiPileDataset(texts, batching=Batches(16))
    seen = {}
    for batch in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=60):
        assert type(batch) is Batch and isinstance(batch["data"], PackedBytes)
        assert len(batch["data"]) == len(batch["key"])
        assert batch["label"].dtype == batch["size"].dtype == batch["index"].dtype == torch.int64
        seen.update(zip(batch["key"], batch["data"]))
    assert seen == expected


def test_collate_fn_is_the_users_and_needs_batch_size(texts):
    ds = CorgiPileDataset(texts, batching=Batches(10, collate_fn=lambda samples: [s["key"] for s in samples]))
    batches = list(ds)
    assert len(batches) == len(ds) == 20 and all(isinstance(k, str) for k in batches[0])
    with pytest.raises(TypeError, match="size"):
        Batches(collate_fn=list)
    with pytest.raises(ValueError, match="batch size"):
        Batches(0)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return image_pack(tmp_path_factory, "images", 12)


def resize_to_16(image: torch.Tensor) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image.numpy()).resize((16, 16)))


@pytest.mark.slow
def test_decoded_images_stack_with_a_fixed_size_transform(images):
    ds = CorgiPileDataset(images, batching=Batches(5), decode="rgb", transform=resize_to_16)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=60))
    assert [tuple(b["data"].shape) for b in batches] == [(5, 16, 16, 3), (5, 16, 16, 3), (2, 16, 16, 3)]
    assert batches[0]["data"].dtype == torch.uint8


def test_images_of_different_sizes_name_the_sample_that_broke_the_stack(images):
    ds = CorgiPileDataset(images, batching=Batches(12), decode="rgb")
    with pytest.raises(BatchError, match=r"sample '\w+/\d+' has data as a tensor of shape \(\d+, \d+, 3\), "
                                         r"the batch's first sample '\w+/\d+' has a tensor of shape "
                                         r".*resize transform.*collate_fn="):
        next(iter(ds))
    with pytest.raises(BatchError, match="PIL image"):
        next(iter(CorgiPileDataset(images, batching=Batches(4), decode="pil")))


@pytest.mark.parametrize("batch_size", [None, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_is_right_with_uneven_partitions(tmp_path, batch_size, drop_last):
    for i in range(40):
        write_text(tmp_path / "corpus" / f"c{i % 2}" / f"t{i:03d}.txt", 3 + i % 5, seed=i)
    pack(tmp_path / "corpus", tmp_path / "pack", PackOptions(block_samples=4, shard_bytes=300), progress=False)
    shards = [s.path for s in CorgiPileDataset(tmp_path / "pack").manifest.shards]
    assert len(shards) >= 4
    partitions = {0: shards[:1], 1: shards[1:]}  # rank 0 owns 4 samples, rank 1 the other 36
    samples = 4 if drop_last else 36             # the smallest partition's count, or the largest's (padding)
    expected = samples if batch_size is None else samples // 3 if drop_last else -(-samples // 3)
    for rank in range(2):
        ds = CorgiPileDataset(tmp_path / "pack", batching=None if batch_size is None else Batches(batch_size),
                              ranks=Ranks(rank=rank, world_size=2, partitions=partitions, drop_last=drop_last))
        assert len(ds) == len(list(ds)) == expected

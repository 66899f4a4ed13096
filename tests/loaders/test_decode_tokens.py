"""decode="tokens": the ids of a ``.npy`` field as an int64 tensor, on a real pack, beside stock webdataset."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import webdataset
from PIL import Image

from corgi_io.errors import DecodeError
from corgi_io.loaders import CorgiPileDataset, Shuffle
from corgi_io.loaders.decode import token_ids
from corgi_io.packing import PackOptions, pack

IDS = {"a": np.array([5, 7, 65535], dtype="<u2"), "b": np.array([70000, 1], dtype="<u4")}


@pytest.fixture(scope="module")
def tokens_pack(tmp_path_factory):
    """A pack of samples with an image and a ``.npy`` field of token ids (uint16 and uint32)."""
    root = tmp_path_factory.mktemp("tokens")
    (root / "src").mkdir()
    for key, ids in IDS.items():
        Image.new("RGB", (8, 8)).save(root / "src" / f"{key}.jpg")
        np.save(root / "src" / f"{key}.npy", ids)
    pack(root / "src", root / "out", PackOptions(order="keep"), progress=False)
    return root / "out"


def test_the_loader_gives_the_ids_as_int64(tokens_pack):
    samples = list(CorgiPileDataset(tokens_pack, shuffle=Shuffle("none"), seed=0, decode={"npy": "tokens"}))
    assert [sample["key"] for sample in samples] == list(IDS)
    for sample in samples:
        assert sample["npy"].dtype == torch.int64 and sample["npy"].tolist() == IDS[sample["key"]].tolist()


def test_stock_webdataset_decodes_the_same_ids(tokens_pack):
    urls = sorted(str(path) for path in tokens_pack.glob("shard-*.tar"))
    for sample in webdataset.WebDataset(urls, shardshuffle=False).decode():
        assert sample["npy"].tolist() == IDS[sample["__key__"]].tolist()


@pytest.mark.parametrize("array", [np.array([{"a": 1}], dtype=object), np.zeros((2, 2), dtype=np.int64),
                                   np.array([0.5])])
def test_pickles_and_arrays_that_are_not_ids_are_refused(array):
    data = io.BytesIO()
    np.save(data, array, allow_pickle=True)
    with pytest.raises(DecodeError, match="sample 'k'"):
        token_ids(data.getvalue(), {"key": "k"})

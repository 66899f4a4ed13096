"""collate_samples: what each field of a batch becomes, and errors that name the sample that broke it."""
import copy

import numpy as np
import pytest
import torch
from PIL import Image

from corgi_io import BatchError, CorgiError
from corgi_io.loaders import PackedBytes, collate_samples


def sample(i: int, data, **extra) -> dict:
    return {"index": i, "key": f"k/{i}", "label": i % 3, "size": 10 * i, "kind": "image", "ext": "jpg",
            "data": data, **extra}


def test_arrays_and_tensors_stack_numbers_become_tensors_and_strings_lists():
    arrays = collate_samples([sample(i, np.full((4, 5, 3), i, np.uint8)) for i in range(3)])
    assert arrays["data"].shape == (3, 4, 5, 3) and arrays["data"].dtype == torch.uint8
    assert arrays["data"][2].eq(2).all()
    for name in ("index", "label", "size"):
        assert arrays[name].dtype == torch.int64
    assert arrays["size"].tolist() == [0, 10, 20]
    assert arrays["key"] == ["k/0", "k/1", "k/2"] and arrays["kind"] == ["image"] * 3 and arrays["ext"] == ["jpg"] * 3
    tensors = collate_samples([sample(i, torch.full((2, 8), float(i))) for i in range(4)])
    assert tensors["data"].shape == (4, 2, 8) and tensors["data"][3].eq(3).all()
    texts = collate_samples([sample(i, f"text {i}", score=i / 2, flag=i > 0) for i in range(2)])
    assert texts["data"] == ["text 0", "text 1"]
    assert texts["score"].dtype == torch.float64 and texts["flag"].tolist() == [False, True]


def test_tuples_and_dicts_from_a_transform_collate_field_by_field():
    batch = collate_samples([sample(i, (np.zeros((2, 2)), {"mask": np.ones(3), "n": i})) for i in range(3)])
    image, extra = batch["data"]
    assert image.shape == (3, 2, 2) and extra["mask"].shape == (3, 3) and extra["n"].tolist() == [0, 1, 2]


def test_a_shape_mismatch_names_both_samples_and_the_fix():
    samples = [sample(0, np.zeros((64, 64, 3))), sample(1, np.zeros((64, 64, 3))), sample(2, np.zeros((64, 80, 3)))]
    with pytest.raises(BatchError) as caught:
        collate_samples(samples)
    message = str(caught.value)
    assert message == ("sample 'k/2' has data as an array of shape (64, 80, 3), the batch's first sample 'k/0' has "
                       "an array of shape (64, 64, 3): decode to a fixed size (a resize transform) or pass collate_fn=")
    assert isinstance(caught.value, CorgiError) and isinstance(caught.value, ValueError) and "\n" not in message


def test_mixed_types_and_pil_images_are_refused_with_the_key():
    with pytest.raises(BatchError, match=r"sample 'k/1' has data as a str, the batch's first sample 'k/0' has "
                                         r"an array of shape \(2,\)"):
        collate_samples([sample(0, np.zeros(2)), sample(1, "a note")])
    with pytest.raises(BatchError, match=r"sample 'k/1' has data as an array of shape \(2,\), "
                                         r".* has a tensor of shape \(2,\)"):
        collate_samples([sample(0, torch.zeros(2)), sample(1, np.zeros(2))])
    with pytest.raises(BatchError, match=r"sample 'k/0' has data as a PIL image.*collate_fn="):
        collate_samples([sample(0, Image.new("RGB", (4, 4))), sample(1, Image.new("RGB", (4, 4)))])
    with pytest.raises(BatchError, match=r"sample 'k/1' has label as None, the batch's first sample 'k/0' has an int"):
        collate_samples([sample(0, b""), sample(1, b"", label=None)])


def test_raw_bytes_become_one_buffer_plus_offsets():
    items = [b"abc", b"", bytearray(b"de"), memoryview(b"fghij")]
    batch = collate_samples([sample(i, data) for i, data in enumerate(items)])
    packed = batch["data"]
    assert isinstance(packed, PackedBytes) and packed.buffer == b"abcdefghij"
    assert packed.offsets.dtype == np.int64 and packed.offsets.tolist() == [0, 3, 3, 5, 10]
    assert len(packed) == 4 and list(packed) == [b"abc", b"", b"de", b"fghij"]
    assert packed[0] == b"abc" and packed[-1] == b"fghij" and isinstance(packed[2], bytes)
    with pytest.raises(IndexError):
        packed[4]
    again = copy.deepcopy(packed)  # the same reduction as between DataLoader processes
    assert list(again) == list(packed) and repr(again) == "PackedBytes(4 items, 10 bytes)"


def test_a_batch_sends_its_small_tensors_inline_and_large_ones_through_shared_memory():
    from corgi_io.loaders.collate import INLINE_BYTES, Batch

    batch = collate_samples([sample(i, torch.zeros(INLINE_BYTES // 2)) for i in range(2)])  # data: 2 x 4 bytes x ...
    assert isinstance(batch, Batch) and isinstance(batch, dict)
    rebuild, (fields, inline) = batch.__reduce__()
    assert inline == ["index", "label", "size"]                      # int64 tensors of 2: as numpy arrays
    assert isinstance(fields["label"], np.ndarray) and isinstance(fields["data"], torch.Tensor)
    again = rebuild(fields, inline)
    assert type(again) is Batch and again["label"].dtype == torch.int64 and again["label"].tolist() == [0, 1]
    assert again.keys() == batch.keys() and again["data"] is batch["data"]

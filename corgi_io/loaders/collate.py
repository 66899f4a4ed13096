"""Batching corgi samples: `collate_samples`, the default `collate_fn` of `CorgiPileDataset(batching=Batches(B))`.

A batch is one dict (a `Batch`) with the samples' fields side by side:

- arrays or tensors of one shape (decoded images, clips) -> one stacked tensor (B, ...); tensors that are
  already rows 0..B-1 of one tensor (an `ImageDecoder`'s batch) -> that tensor, not a copy;
- integers (`index`, `label`, `size`) -> an int64 tensor; floats -> float64; bools -> bool;
- raw bytes (`decode=None`) -> one `PackedBytes`: a single buffer plus offsets, which crosses
  DataLoader worker queues as one object instead of B;
- strings (`key`, `kind`, `ext`, decoded text) and anything else -> a list;
- tuples and dicts (a transform returning several values) -> collated field by field;
- a sample's fields (packs of several fields per sample): each as above, under its name; the primary
  field is `data` itself, not a second copy; a field that some samples of the batch lack -> a list
  with None for those samples (`fields` lists each sample's names).

Arrays of different shapes, or a PIL image, raise `BatchError` naming the sample's key.

Moving a batch from a DataLoader worker to the trainer costs little per batch, whatever B: the raw
bytes are one buffer, and small tensors (labels, sizes, indices) travel inline with the batch.  A
tensor otherwise crosses through its own shared-memory file, whose handoff (a file descriptor passed
over a socket) costs about half a millisecond, several times the cost of copying a few kilobytes;
large tensors (a batch of decoded images) still take the shared-memory path, where it pays, and a
worker reuses that memory once the trainer drops the batch (`corgi_io.loaders.shared_memory`).
"""
from __future__ import annotations

import copy
import numbers

import numpy as np
import torch

from corgi_io.errors import BatchError
from corgi_io.loaders.shared_memory import WORKER_BUFFERS

_FIX = "decode to a fixed size (a resize transform) or pass collate_fn="
INLINE_BYTES = 512 << 10  # CPU tensors smaller than this cross worker queues inline (see the module docstring)
_NUMPY_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.float16, torch.float32, torch.float64}


class Batch(dict):
    """A collated batch: a plain dict, except between processes: its small tensors travel inline (as numpy
    arrays, tensors again on arrival) instead of one shared-memory file each, and a tensor over a worker's
    pooled shared memory (an `ImageDecoder`'s batch) travels as a `Lease` on it (`shared_memory`)."""

    def __copy__(self) -> "Batch":  # a copy in this process, not the pickled form (which holds leases in a worker)
        return Batch(self)

    def __deepcopy__(self, memo: dict) -> "Batch":
        copied = memo[id(self)] = Batch()
        copied.update((copy.deepcopy(name, memo), copy.deepcopy(value, memo)) for name, value in self.items())
        return copied

    def __reduce__(self):
        sent = {}  # what each tensor travels as, once per tensor: a field and its alias arrive as one tensor
        for value in self.values():  # small fields inline, but not over a pooled buffer (a partial last batch):
            if _travels_inline(value) and WORKER_BUFFERS.lease(value) is None:  # its lease is what releases it
                sent.setdefault(id(value), value.numpy())
        inline = sorted(name for name, value in self.items() if id(value) in sent)
        return _rebuild_batch, ({name: _leased(value, sent) for name, value in self.items()}, inline)


def _leased(value, sent: dict):
    """`value` with each tensor as `sent` has it, and each tensor over a pooled buffer inside its lists, tuples and
    dicts as a `Lease` too: a row of a batch sent as it is would reach the receiver outside the lease, and the
    worker would write that buffer again once the leased tensors were dropped, under the row still held."""
    if isinstance(value, torch.Tensor):
        if id(value) not in sent:
            sent[id(value)] = WORKER_BUFFERS.lease(value) or value
        return sent[id(value)]
    if type(value) in (list, tuple):
        return type(value)(_leased(item, sent) for item in value)
    if type(value) is dict:
        return {key: _leased(item, sent) for key, item in value.items()}
    return value


def _travels_inline(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and not value.requires_grad \
        and value.dtype in _NUMPY_DTYPES and value.nbytes < INLINE_BYTES


def _rebuild_batch(fields: dict, inline: list) -> Batch:
    """The receiving side of `Batch.__reduce__`: the inline arrays become tensors again (no copy)."""
    batch, tensors = Batch(fields), {}
    for name in inline:
        array = batch[name]
        batch[name] = tensors.setdefault(id(array), torch.from_numpy(array))
    return batch


class PackedBytes:
    """Byte strings as one buffer plus offsets: item i is ``buffer[offsets[i]:offsets[i + 1]]``.

    ``buffer`` is a `bytes` object and ``offsets`` an int64 array of ``len + 1`` entries.  Moving
    one of these between processes copies one buffer, not one object per sample.  It behaves as
    a read-only sequence of `bytes`: ``len``, indexing and iteration.
    """

    __slots__ = ("buffer", "offsets")

    def __init__(self, buffer: bytes, offsets):
        self.buffer, self.offsets = buffer, np.asarray(offsets, dtype=np.int64)

    @classmethod
    def pack(cls, items) -> "PackedBytes":
        """Join byte strings (bytes, bytearray or memoryview) into one buffer, recording where each starts."""
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in items], out=offsets[1:])
        return cls(b"".join(items), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"PackedBytes index {i} out of range for {n} items")
        i %= n
        return self.buffer[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self):
        bounds = self.offsets.tolist()
        return (self.buffer[a:z] for a, z in zip(bounds, bounds[1:]))

    def __reduce__(self):
        return PackedBytes, (self.buffer, self.offsets)

    def __repr__(self) -> str:
        return f"PackedBytes({len(self)} items, {len(self.buffer)} bytes)"


def collate_samples(samples: list) -> Batch:
    """One batch dict from a list of sample dicts (see the module docstring for what each field becomes).

    Raises BatchError, naming the key of the sample that broke it, when arrays of different shapes
    or types meet in one field, or when a field holds PIL images.
    """
    keys = [sample.get("key") for sample in samples]
    batch = Batch()
    for name in dict.fromkeys(name for sample in samples for name in sample):
        values = [sample.get(name) for sample in samples]
        if name != "data" and "data" in batch and all(value is sample.get("data") for value, sample in
                                                      zip(values, samples)):
            batch[name] = batch["data"]  # the primary field under its own name
        elif any(name not in sample for sample in samples):
            batch[name] = values  # a field that some samples lack: None for those
        else:
            batch[name] = collate_field(name, values, keys)
    return batch


class PadCollate:
    """A `collate_fn` for 1-D sequences of different lengths (``decode="tokens"`` with `Budget(T)` or
    `Batches(B, group_by_size=True)`): field `field` padded with `pad_id` to the batch's longest, as one int64
    tensor (B, max), with `mask` (True on real tokens) beside it; every other field as `collate_samples` makes it.
    A padded model pays ``B * max`` per batch, which is what ``Budget(T, cost="padded")`` budgets."""

    def __init__(self, pad_id: int = 0, field: str = "data"):
        self.pad_id, self.field = int(pad_id), field

    def __call__(self, samples: list) -> Batch:
        rows = [torch.as_tensor(sample[self.field]) for sample in samples]
        if any(row.dim() != 1 for row in rows):
            key = next(s.get("key") for s, row in zip(samples, rows) if row.dim() != 1)
            raise BatchError(f"sample {key!r} has {self.field} of {_describe(rows[0])}: PadCollate pads 1-D sequences")
        lengths = torch.tensor([len(row) for row in rows], dtype=torch.int64)
        padded = torch.full((len(rows), max(map(len, rows), default=0)), self.pad_id, dtype=torch.int64)
        for i, row in enumerate(rows):
            padded[i, :len(row)] = row
        batch = collate_samples([{k: v for k, v in s.items() if k != self.field} for s in samples])
        batch[self.field] = padded
        batch["mask"] = torch.arange(padded.shape[1]) < lengths[:, None]
        return batch


def collate_field(name: str, values: list, keys: list):
    """The batched form of one field's `values` (one per sample; `keys` name the samples in errors)."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        rows = _leading_rows(values)
        return torch.stack(_same_shape(name, values, keys)) if rows is None else rows
    if isinstance(first, np.ndarray):
        return torch.from_numpy(np.stack(_same_shape(name, values, keys)))
    if isinstance(first, (bytes, bytearray, memoryview)):
        return PackedBytes.pack(values)
    if isinstance(first, (bool, np.bool_, numbers.Number)):
        return _numbers(name, values, keys)
    if type(first).__module__.startswith("PIL."):
        raise BatchError(f"sample {keys[0]!r} has {name} as a PIL image, which does not stack: convert it to a "
                         "fixed-size array or tensor in transform= (resize, then numpy.asarray), or pass collate_fn=")
    if isinstance(first, dict):
        return {k: collate_field(f"{name}[{k!r}]", [value[k] for value in values], keys) for k in first}
    if isinstance(first, tuple):
        return tuple(collate_field(f"{name}[{i}]", [value[i] for value in values], keys) for i in range(len(first)))
    return list(values)


def _leading_rows(values: list):
    """The n `values` as one (n, ...) tensor without a copy, when they are consecutive rows of one contiguous
    tensor, in order (images decoded into their batch's rows by `BatchSlots`); None otherwise."""
    first = values[0]
    if not first.is_contiguous():
        return None
    storage, start, step = first.untyped_storage().data_ptr(), first.storage_offset(), first.numel()
    for i, value in enumerate(values):
        if (not isinstance(value, torch.Tensor) or value.untyped_storage().data_ptr() != storage
                or value.storage_offset() != start + i * step
                or value.shape != first.shape or value.dtype != first.dtype or not value.is_contiguous()):
            return None
    if first.untyped_storage().nbytes() < (start + len(values) * step) * first.element_size():
        return None
    return first.as_strided((len(values), *first.shape), (step, *first.stride()), start)


def _same_shape(name: str, values: list, keys: list) -> list:
    """`values` unchanged when all are arrays (or all tensors) of the first one's shape; else a BatchError."""
    first = values[0]
    for key, value in zip(keys, values):
        if type(value) is not type(first) or value.shape != first.shape:
            raise BatchError(f"sample {key!r} has {name} as {_describe(value)}, the batch's first sample "
                             f"{keys[0]!r} has {_describe(first)}: {_FIX}")
    return values


def _numbers(name: str, values: list, keys: list) -> torch.Tensor:
    """Numbers as one tensor: bool, int64 or float64 by the first value's kind."""
    first = values[0]
    dtype = torch.bool if isinstance(first, (bool, np.bool_)) else \
        torch.int64 if isinstance(first, numbers.Integral) else torch.float64
    try:
        return torch.tensor(values, dtype=dtype)
    except (TypeError, ValueError, RuntimeError):
        key, value = next(((k, v) for k, v in zip(keys, values)
                           if not isinstance(v, (bool, np.bool_, numbers.Number))), (keys[0], first))
        raise BatchError(f"sample {key!r} has {name} as {_describe(value)}, the batch's first sample "
                         f"{keys[0]!r} has {_describe(first)}: pass collate_fn=") from None


def _describe(value) -> str:
    """`an array of shape (64, 80, 3)`, `a tensor of shape (2,)`, or `a str` (the type of anything else)."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{'a tensor' if isinstance(value, torch.Tensor) else 'an array'} of shape {tuple(value.shape)}"
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"

"""Batches of raw bytes without a dict per sample (issue 20 §4): chosen by `CorgiPileDataset` on its own.

With `Batches(B)` and nothing to do per sample (no decode, no transform, the default collate), a
batch is what `collate_samples` would make of its samples, so the reader builds it from its
pieces' bytes and the manifest's columns with numpy (`corgi_io.reading.raw_batches`) and `row_batch`
turns that into the same `Batch`: int64 tensors for `index`, `label`, `size`, lists of str for
`key`, `kind`, `ext` (and a blend's `source`), one `PackedBytes` for `data`, in the same field
order.  Samples, order, checksums, progress (samples counted per batch) and the cache are the
per-sample path's; only the Python per sample is gone.

In a DataLoader worker the payloads are gathered into shared memory (`shared_buffer`) and the batch's
`data` is a `SharedPackedBytes`: pickled onto the worker queue, torch passes the memory's handle, not
its bytes (a pickled `bytes` is copied four times: into the pickle, through the pipe twice, out of
the pickle), and the main process gets a plain `PackedBytes` (one copy, out of the shared memory).
"""
from __future__ import annotations

import torch

from corgi_io.loaders.collate import Batch, PackedBytes, collate_samples
from corgi_io.loaders.device_images import EncodedImages
from corgi_io.loaders.shared_memory import WORKER_BUFFERS
from corgi_io.reading.buffers import warm_batch_memory

_LISTS = ("key", "kind", "ext")  # columns of names, lists in a batch; the others are integers


def fast_batches_apply(spec, decode, manifests) -> bool:
    """Whether batches can skip the sample dicts: `Batches(B)` (`spec.batch_size` set, not rows of tokens), raw bytes (no `decode`,
    or images decoded later on a device: `device_images`), no transform, the default `collate_samples`, and every
    pack of one field per sample (several fields per sample differ from sample to sample: those go through the per-sample path)."""
    raw = decode is None or getattr(decode, "on_device", False)
    return (spec.batch_size is not None and spec.rows is None and raw and spec.transform is None
            and spec.collate_fn is collate_samples and all(m.max_fields == 1 for m in manifests))


def row_batch(rows, images=None) -> Batch:
    """The `Batch` of a `RowBatch`, field for field what `collate_samples` gives for the same samples; with
    `images` (an `ImageDecoder` on a device), its `data` is the `EncodedImages` that it decodes."""
    columns = rows.columns
    batch = Batch({name: _field(name, columns[name]) for name in ("index", "key", "label", "size", "kind", "ext")})
    shared = isinstance(rows.buffer, torch.Tensor)
    batch["data"] = (SharedPackedBytes if shared else PackedBytes)(rows.buffer, rows.offsets)
    if images is not None:
        batch["data"] = EncodedImages(batch["data"], columns["index"], batch["key"], images)
    if "source" in columns:  # a blend's samples gain it last
        batch["source"] = columns["source"].tolist()
    return batch


def _field(name: str, column):
    """A column as `collate_samples` batches its values: names as a list, integers as an int64 tensor."""
    return column.tolist() if name in _LISTS else torch.from_numpy(column.astype("int64", copy=False))


def shared_buffer(nbytes: int) -> tuple:
    """(a uint8 tensor in shared memory, its first `nbytes` as a writable memoryview): a batch's buffer in a
    worker (`ordered_batches`' `allocate`), from this process's `SharedBuffers`."""
    return WORKER_BUFFERS.take(nbytes)


class SharedPackedBytes(PackedBytes):
    """A `PackedBytes` whose buffer is a uint8 tensor in shared memory (`shared_buffer`): it reads as one (items
    are `bytes`), and unpickles as a plain `PackedBytes`, its bytes copied out of the shared memory."""

    __slots__ = ("tensor",)

    def __init__(self, tensor, offsets):
        super().__init__(None, offsets)
        self.buffer, self.tensor = memoryview(tensor.numpy())[:int(self.offsets[-1])].toreadonly(), tensor

    def __getitem__(self, i: int) -> bytes:
        return bytes(super().__getitem__(i))

    def __iter__(self):
        return map(bytes, super().__iter__())

    def __reduce__(self):
        return _unshared, (self.tensor, self.offsets)


def _unshared(tensor, offsets) -> PackedBytes:
    """The `PackedBytes` of a `SharedPackedBytes` received from another process (its bytes from memory that
    malloc keeps: `warm_batch_memory`); the shared buffer is flagged released, for its sender to reuse."""
    warm_batch_memory()
    array = tensor.numpy()
    packed = PackedBytes(array[:int(offsets[-1])].tobytes(), offsets)
    array[-1] = 1
    return packed

"""Batches of raw bytes without a dict per sample (issue 20 §4): chosen by `CorgiPileDataset` on its own.

With `batch_size` and nothing to do per sample (no decode, no transform, the default collate), a
batch is what `collate_samples` would make of its samples, so the reader builds it from its
pieces' bytes and the manifest's columns with numpy (`corgi_io.reading.rows`) and `row_batch`
turns that into the same `Batch`: int64 tensors for `index`, `label`, `size`, lists of str for
`key`, `kind`, `ext` (and a blend's `source`), one `PackedBytes` for `data`, in the same field
order.  Samples, order, checksums, progress (samples counted per batch) and the cache are the
per-sample path's; only the Python per sample is gone.
"""
from __future__ import annotations

import torch

from corgi_io.loaders.collate import Batch, PackedBytes, collate_samples

_LISTS = ("key", "kind", "ext")  # columns of names, lists in a batch; the others are integers


def fast_batches_apply(spec, decode, manifests) -> bool:
    """Whether batches can skip the sample dicts: `batch_size` set, raw bytes (no `decode`, no transform), the
    default `collate_samples`, and every pack of one field per sample (several fields per sample differ from
    sample to sample: those go through the per-sample path)."""
    return (spec.batch_size is not None and decode is None and spec.transform is None
            and spec.collate_fn is collate_samples and all(m.max_fields == 1 for m in manifests))


def row_batch(rows) -> Batch:
    """The `Batch` of a `RowBatch`, field for field what `collate_samples` gives for the same samples."""
    columns = rows.columns
    batch = Batch({name: _field(name, columns[name]) for name in ("index", "key", "label", "size", "kind", "ext")})
    batch["data"] = PackedBytes(rows.buffer, rows.offsets)
    if "source" in columns:  # a blend's samples gain it last
        batch["source"] = columns["source"].tolist()
    return batch


def _field(name: str, column):
    """A column as `collate_samples` batches its values: names as a list, integers as an int64 tensor."""
    return column.tolist() if name in _LISTS else torch.from_numpy(column.astype("int64", copy=False))

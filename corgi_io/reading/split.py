"""Split stage: cut a piece's bytes into sample dicts by the manifest's offsets.

No tar or TFRecord framing is parsed: the manifest holds every payload's offset and length.
Everything per sample is looked up once per piece with numpy (`tolist()` of column slices;
kind and extension names through object arrays), so the per-sample cost is one dict and one
`bytes` slice.  The slice is a copy on purpose: a sample's `data` is a plain `bytes` that
owns its memory, never a memoryview into the piece (a view cannot cross a DataLoader
worker's queue, and would pin the whole piece while any of its samples lives).
"""
from __future__ import annotations

import numpy as np

from corgi_io.manifest import KINDS


class PieceSplitter:
    """`split(piece, data)`: the piece's samples as dicts {index, key, label, size, kind, ext, data}, and their payload bytes."""

    def __init__(self, manifest):
        self.manifest, self.samples = manifest, manifest.samples
        self.kind_names = np.array(KINDS, dtype=object)
        self.ext_names = np.array(manifest.extensions, dtype=object)

    def split(self, piece, data: bytes) -> tuple:
        """(the samples of `piece` (block, start, stop) whose records are `data`, in stored order; their payload bytes)."""
        _, start, stop = piece
        s = self.samples
        begins, nbytes = s.data_offset[start:stop] - s.offset[start], s.bytes[start:stop]
        ends = (begins + nbytes).tolist()
        kinds = self.kind_names[s.kind[start:stop]].tolist()
        exts = self.ext_names[s.ext[start:stop]].tolist()
        return [{"index": index, "key": key, "label": label, "size": size, "kind": kind, "ext": ext,
                 "data": data[begin:end]}
                for index, key, label, size, kind, ext, begin, end in zip(
                    range(start, stop), self.manifest.keys(start, stop), s.label[start:stop].tolist(),
                    s.size[start:stop].tolist(), kinds, exts, begins.tolist(), ends)], int(nbytes.sum())

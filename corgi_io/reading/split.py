"""Split stage: cut a piece's bytes into sample dicts by the manifest's offsets.

No tar or TFRecord framing is parsed for packs of one field per sample: the manifest holds every
payload's offset and length.  In a pack whose samples have several fields (`Manifest.max_fields`
above 1) the piece's records are parsed by the format's `parse_block` (they are already verified),
and each sample also holds every field under its name (the primary one is `data` itself) and
`fields`, the names it has, primary first.
Everything per sample is looked up once per piece with numpy (`tolist()` of column slices;
kind and extension names through object arrays), so the per-sample cost is one dict and one
`bytes` slice.  The slice is a copy on purpose: a sample's `data` is a plain `bytes` that
owns its memory, never a memoryview into the piece (a view cannot cross a DataLoader
worker's queue, and would pin the whole piece while any of its samples lives).
"""
from __future__ import annotations

import numpy as np

from corgi_io.errors import CorruptDataError, FormatError
from corgi_io.formats import RESERVED_FIELDS, get_format
from corgi_io.manifest import KINDS


class PieceSplitter:
    """`split(piece, data)`: the piece's samples as dicts {index, key, label, size, kind, ext, data}, and their payload bytes."""

    def __init__(self, manifest):
        self.manifest, self.samples = manifest, manifest.samples
        self.kind_names = np.array(KINDS, dtype=object)
        self.ext_names = np.array(manifest.extensions, dtype=object)
        self.fmt = get_format(manifest.format) if manifest.max_fields > 1 else None

    def split(self, piece, data: bytes) -> tuple:
        """(the samples of `piece` (block, start, stop) whose records are `data`, in stored order; their payload bytes)."""
        _, start, stop = piece
        s = self.samples
        begins, nbytes = s.data_offset[start:stop] - s.offset[start], s.bytes[start:stop]
        ends = (begins + nbytes).tolist()
        samples = self.describe(start, stop, (data[begin:end] for begin, end in zip(begins.tolist(), ends)))
        payload_bytes = int(nbytes.sum())
        if self.fmt is not None:
            payload_bytes += self._add_fields(piece, data, samples)
        return samples, payload_bytes

    def describe(self, start: int, stop: int, payloads) -> list:
        """The dicts {index, key, label, size, kind, ext, data} of samples [start, stop), `data` from `payloads`
        (an iterable, one a sample, in order)."""
        s = self.samples
        kinds = self.kind_names[s.kind[start:stop]].tolist()
        exts = self.ext_names[s.ext[start:stop]].tolist()
        return [{"index": index, "key": key, "label": label, "size": size, "kind": kind, "ext": ext, "data": data}
                for index, key, label, size, kind, ext, data in zip(
                    range(start, stop), self.manifest.keys(start, stop), s.label[start:stop].tolist(),
                    s.size[start:stop].tolist(), kinds, exts, payloads)]

    def columns(self, piece) -> dict:
        """The samples of `piece` (block, start, stop) as numpy columns, for batches built without a dict per sample
        (`corgi_io.reading.raw_batches`): `begin`/`end` (payload bounds in the piece's bytes), `index`, `key`, `label`,
        `size`, `kind`, `ext` (names as object arrays), each in stored order; single-field packs only."""
        _, start, stop = piece
        s = self.samples
        begins = s.data_offset[start:stop] - s.offset[start]
        keys = np.empty(stop - start, dtype=object)
        keys[:] = self.manifest.keys(start, stop)
        return {"begin": begins, "end": begins + s.bytes[start:stop], "index": np.arange(start, stop, dtype=np.int64),
                "key": keys, "label": np.asarray(s.label[start:stop]), "size": np.asarray(s.size[start:stop]),
                "kind": self.kind_names[s.kind[start:stop]], "ext": self.ext_names[s.ext[start:stop]]}

    def _add_fields(self, piece, data: bytes, samples: list) -> int:
        """Put each field of the piece's records into its sample dict, and `fields`; returns the extra bytes held."""
        _, start, _ = piece
        offset = int(self.samples.offset[start])
        shard = self.manifest.shards.path(int(self.samples.shard[start]))
        try:
            records = list(self.fmt.parse_block(data, offset))
        except FormatError as exc:
            raise CorruptDataError(f"{shard}: {exc}", shard=shard, offset=offset, key=samples[0]["key"]) from None
        if [record.key for record in records] != [sample["key"] for sample in samples]:
            raise CorruptDataError(f"{shard}: byte offset {offset}: the records do not hold the manifest's keys",
                                   shard=shard, offset=offset, key=samples[0]["key"])
        extra = 0
        for sample, record in zip(samples, records):
            sample.update(record.fields[1:])
            if record.fields[0][0] not in RESERVED_FIELDS:  # an odd primary extension (--kind) is in `ext` alone
                sample[record.fields[0][0]] = sample["data"]
            sample["fields"] = [name for name, _ in record.fields]
            extra += sum(len(value) for _, value in record.fields[1:])
        return extra

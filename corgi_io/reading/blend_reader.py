"""BlendReader: a blend's buffer plan read through each source's `PieceReader`.

A blend's plan (`corgi_io.schedule.blend_plan`) lists *virtual* pieces and ids: one epoch's runs of
all sources as one virtual pack (`BlendEpoch`).  Each virtual piece maps back to one piece of one
source, which that source's reader reads, verifies (and caches, for a remote pack) as it would its
own; its samples keep their own pack's `index` and gain `source`, the source's name.  The reads of
all sources share one read-ahead window and one residency count, so the memory bound is the single
pack's: the pieces of the buffers being yielded plus `prefetch_pieces` read ahead.
"""
from __future__ import annotations

import numpy as np

from corgi_io.reading.piece_reader import Residency, ordered_samples
from corgi_io.reading.raw_batches import PieceRows, ordered_batches


class BlendReader:
    """Reads virtual pieces of `blend` (a `BlendEpoch`) through `readers[s]`, the `PieceReader` of source s named
    ``names[s]``, `prefetch_pieces` ahead, on as many threads as the most any source's reader uses."""

    def __init__(self, readers, names, blend, prefetch_pieces: int = 16):
        self.readers, self.names, self.blend = list(readers), list(names), blend
        self.prefetch_pieces = max(1, prefetch_pieces)
        self.read_threads = max(reader.read_threads for reader in self.readers)
        self.residency = Residency()

    @property
    def peak_resident_bytes(self) -> int:
        """The most sample data held at once, over all sources."""
        return self.residency.peak

    def local(self, piece) -> tuple:
        """(source, the piece in that source's ids) of one virtual piece."""
        return self.blend.local_piece(piece)

    def samples(self, plan):
        """Yield the plan's samples in its order, each with `source`; its `index` is the sample's in its own pack."""
        return ordered_samples(plan, self.piece_samples, self._nbytes, self.residency, ahead=self.prefetch_pieces,
                               threads=self.read_threads, clock=self.readers[0].clock)

    def piece_samples(self, piece) -> tuple:
        """(first virtual id, samples, payload bytes, record bytes) of one virtual piece, in a reading thread."""
        source, local = self.local(piece)
        _, samples, payload_bytes, record_bytes = self.readers[source].piece_samples(local)
        name = self.names[source]
        for sample in samples:
            sample["source"] = name
        return int(piece[1]), samples, payload_bytes, record_bytes

    def batches(self, plan, batch_size: int, allocate=None):
        """The plan's samples as `RowBatch`es of `batch_size`, each row with its `source` (`PieceReader.batches`)."""
        return ordered_batches(plan, self.piece_rows, self._nbytes, self.residency, batch_size,
                               ahead=self.prefetch_pieces, threads=self.read_threads, allocate=allocate,
                               clock=self.readers[0].clock)

    def piece_rows(self, piece) -> PieceRows:
        """One virtual piece as `PieceRows` of its virtual ids, read through its source's reader, in a reading thread."""
        source, local = self.local(piece)
        rows = self.readers[source].piece_rows(local)
        names = np.empty(len(rows.columns["begin"]), dtype=object)
        names[:] = self.names[source]
        return rows._replace(first=int(piece[1]), columns={**rows.columns, "source": names})

    def _nbytes(self, piece) -> int:
        source, local = self.local(piece)
        return self.readers[source].byte_range(local)[2]

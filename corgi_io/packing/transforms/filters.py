"""`SizeFilter`: keep the samples whose primary field's size lies in [min_size, max_size].

A filter, not a chain step: it needs the primary field's final size, which the pipeline has and a
transform may not (it is a transform's measured size, `Kept.sizes`, or else the pipeline's probe:
pixels, frames, tokens).  So the pipeline asks it, either per sample in a worker, after the chain,

    drop = size_filter.check(key, size)   # None: keep; a Drop: its skip record

or for many samples at once in the driver, over the sizes column that the walk probed (pure
planning, when no transform changes the primary field):

    keep = size_filter.mask(sizes)        # a bool array
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from corgi_io.arguments import check_at_least
from corgi_io.errors import ArgumentError
from corgi_io.packing.transforms.chain import Drop, checking_options


@dataclass(frozen=True)
class SizeFilter:
    """Keep a sample whose size is at least `min_size` and at most `max_size` (None: no bound that side)."""

    name: ClassVar[str] = "size_filter"
    min_size: int | None = None
    max_size: int | None = None

    def __post_init__(self):
        with checking_options(self.name):
            check_at_least("min_size", self.min_size, 0)
            check_at_least("max_size", self.max_size, 0)
            if self.min_size is not None and self.max_size is not None and self.min_size > self.max_size:
                raise ArgumentError(f"min_size must be at most max_size, got {self.min_size} > {self.max_size}")

    def options(self) -> dict:
        """The JSON-able options (the manifest records them)."""
        return {"min_size": self.min_size, "max_size": self.max_size}

    def keep(self, size: int) -> bool:
        """Whether a sample of `size` is kept."""
        return (self.min_size is None or size >= self.min_size) and (self.max_size is None or size <= self.max_size)

    def check(self, key: str, size: int) -> Drop | None:
        """None when the sample `key` of `size` is kept, else the Drop that its skip record gives."""
        if self.keep(size):
            return None
        bound = f"below min_size {self.min_size:,}" if size < (self.min_size or 0) else f"above max_size {self.max_size:,}"
        return Drop(key, f"size {size:,} {bound}")

    def mask(self, sizes: np.ndarray) -> np.ndarray:
        """A bool array: which of `sizes` are kept (the same rule as `keep`, for a whole column at once)."""
        sizes = np.asarray(sizes)
        keep = np.ones(sizes.shape, dtype=bool)
        if self.min_size is not None:
            keep &= sizes >= self.min_size
        if self.max_size is not None:
            keep &= sizes <= self.max_size
        return keep

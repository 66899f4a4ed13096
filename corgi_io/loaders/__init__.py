"""PyTorch loaders: the only part of corgi-io that imports torch."""
from corgi_io.loaders.collate import Batch, PackedBytes, collate_samples
from corgi_io.loaders.dataset import CorgiPileDataset

__all__ = ["Batch", "CorgiPileDataset", "PackedBytes", "collate_samples"]

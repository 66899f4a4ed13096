"""PyTorch loaders: the only part of corgi-io that imports torch."""
from corgi_io.loaders.dataset import CorgiPileDataset

__all__ = ["CorgiPileDataset"]

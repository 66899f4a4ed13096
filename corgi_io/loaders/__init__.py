"""PyTorch loaders: the only part of corgi-io that imports torch."""
from corgi_io.loaders.dataset import CorgiPileDataset
from corgi_io.loaders.decode import AutoDecoder
from corgi_io.loaders.video import VideoDecoder

__all__ = ["AutoDecoder", "CorgiPileDataset", "VideoDecoder"]

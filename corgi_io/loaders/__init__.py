"""PyTorch loaders: the only part of corgi-io that imports torch."""
import warnings

try:
    import torch  # noqa: F401  (checked first, so a missing torch says how to install it)
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
    raise ModuleNotFoundError("corgi_io.loaders needs PyTorch: pip install 'corgi-io[torch]'", name="torch") from None

# torchdata's StatefulDataLoader (0.11) calls torch.set_vital, deprecated in torch 2.13: a warning at every
# loader built, about nothing a user can change.  Only that message, only from torchdata, is silenced.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning, module="torchdata")

from corgi_io.loaders.collate import Batch, PackedBytes, PadCollate, collate_samples
from corgi_io.loaders.dataset import CorgiPileDataset
from corgi_io.loaders.decode import AutoDecoder
from corgi_io.loaders.device import DeviceLoader, to_device
from corgi_io.loaders.image_decoder import ImageDecoder
from corgi_io.loaders.options import Batches, Blend, Budget, Cache, Decoding, Ranks, Reading, Shuffle, TokenRows
from corgi_io.loaders.video import VideoDecoder

__all__ = ["AutoDecoder", "Batch", "Batches", "Blend", "Budget", "Cache", "CorgiPileDataset", "Decoding",
           "DeviceLoader", "ImageDecoder", "PackedBytes", "PadCollate", "Ranks", "Reading", "Shuffle", "TokenRows",
           "VideoDecoder", "collate_samples", "to_device"]

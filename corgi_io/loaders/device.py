"""Copies to the accelerator that overlap compute: `to_device(loader, device)`.

Without it the host-to-device copy of a batch happens inside the training step, on the compute
stream, and the GPU idles while it runs.  `DeviceLoader` keeps one batch ahead: while the model
computes on batch k, batch k + 1 is pinned (page-locked, unless the DataLoader already pinned it) and
copied on a side CUDA stream.  Before batch k + 1 is handed out, the compute stream waits for that
side stream (`wait_stream`, a GPU-side wait: the host does not block), and each copied tensor is
marked used by the compute stream (`record_stream`), so the caching allocator does not reuse its
memory while the step still reads it.

Images that an ``ImageDecoder(device="cuda")`` left encoded (`EncodedImages`) are decoded on the side
stream too, with nvJPEG (`corgi_io.loaders.device_images`).

The host's part of each copy (pinning, issuing the copies, nvJPEG's decode calls) is timed as the stage
``to_device`` on the dataset's `stats` (`corgi_io.timing`), when the loader is a DataLoader of a
`CorgiPileDataset`: wrap the result in ``dataset.stats.watch(...)`` to see it beside the stall.

On a CPU device (or a machine without CUDA) batches pass through unchanged.  Either way, `len`,
`state_dict` and `load_state_dict` are the wrapped loader's: the state handed out with batch k is the
one the loader had when it produced batch k, not after the batch read ahead, so a resume from it
yields batch k + 1 next.
"""
from __future__ import annotations

import torch

from corgi_io.loaders.collate import Batch
from corgi_io.loaders.device_images import EncodedImages
from corgi_io.timing.clock import NULL_CLOCK
from corgi_io.timing.stages import stage_index

TO_DEVICE = stage_index("to_device")


class DeviceLoader:
    """`loader`'s batches on `device`: tensors (inside dicts, lists and tuples) copied one batch ahead on a side
    CUDA stream; anything else (keys, `PackedBytes`) stays as it is.  See the module."""

    def __init__(self, loader, device, pin_memory: bool = True):
        self.loader, self.device, self.pin_memory = loader, torch.device(device), pin_memory
        self._state = None  # the loader's state when it produced the batch handed out last

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict:
        """The wrapped loader's state as of the last batch handed out (not the one read ahead)."""
        return self.loader.state_dict() if self._state is None else self._state

    def load_state_dict(self, state: dict) -> None:
        self._state = None
        self.loader.load_state_dict(state)

    def __iter__(self):
        self._state = None
        if self.device.type != "cuda":
            return iter(self.loader)
        side, compute = torch.cuda.Stream(self.device), torch.cuda.current_stream(self.device)
        stats = getattr(getattr(self.loader, "dataset", None), "stats", None)
        clock = NULL_CLOCK if stats is None else stats.trainer_clock()

        def copy(batch):
            left = clock.switch(TO_DEVICE)
            try:
                with torch.cuda.stream(side):
                    return _moved(batch, self.device, self.pin_memory)
            finally:
                clock.switch(left)

        def settle(batch) -> None:
            compute.wait_stream(side)  # the copy of `batch` is done before the step uses it (a GPU-side wait)
            _record(batch, compute)

        return self._one_ahead(copy, settle)

    def _one_ahead(self, copy, settle):
        """The loader's batches, each `copy`-ed one batch ahead and `settle`-d just before it is handed out, with
        the state of the loader as of that batch."""
        batches = iter(self.loader)
        ahead = self._fetch(batches, copy)
        while ahead is not None:
            batch, state = ahead
            settle(batch)
            ahead = self._fetch(batches, copy)  # the next copy starts now, overlapping this step's compute
            self._state = state
            yield batch

    def _fetch(self, batches, copy) -> tuple | None:
        """(the next batch, copied; the loader's state right after producing it), or None at the end."""
        batch = next(batches, None)
        if batch is None:
            return None
        state = self.loader.state_dict() if hasattr(self.loader, "state_dict") else None
        return copy(batch), state


def to_device(loader, device, pin_memory: bool = True) -> DeviceLoader:
    """Wrap `loader` (a DataLoader, a StatefulDataLoader, any iterable of batches) so that its batches arrive on
    `device`, each copied while the model computes on the one before (`DeviceLoader`)."""
    return DeviceLoader(loader, device, pin_memory)


def _moved(value, device, pin_memory: bool):
    """`value` with every tensor in it copied to `device` without blocking the host (pinned first), and images
    left encoded for the device (`EncodedImages`) decoded there."""
    if isinstance(value, EncodedImages):
        return value.decode(device)
    if isinstance(value, torch.Tensor):
        if pin_memory and not value.is_pinned() and value.device.type == "cpu":
            value = value.pin_memory()
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        moved = {key: _moved(item, device, pin_memory) for key, item in value.items()}
        return Batch(moved) if isinstance(value, Batch) else type(value)(moved)
    if isinstance(value, (list, tuple)) and any(isinstance(item, torch.Tensor) for item in value):
        return type(value)(_moved(item, device, pin_memory) for item in value)
    return value


def _record(value, stream) -> None:
    """Mark every device tensor in `value` as used by `stream` (the caching allocator then keeps its memory)."""
    if isinstance(value, torch.Tensor):
        if value.device.type == "cuda":
            value.record_stream(stream)
    elif isinstance(value, dict):
        for item in value.values():
            _record(item, stream)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _record(item, stream)

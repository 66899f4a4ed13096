"""What `set_epoch` chose, shared with DataLoader workers that live across epochs.

With ``persistent_workers=True`` each worker keeps the copy of the dataset it got when it
started, so an attribute that the main process sets later never reaches it.  `SharedEpoch`
holds the epoch and the per-rank cost model in two small tensors in shared memory, made
when the dataset is constructed, before any worker exists: fork workers inherit the mapping,
and spawn or forkserver workers receive it through torch's multiprocessing reductions (a file
descriptor, no copy), whatever start method the DataLoader picks later.  A plain serialised copy
or `copy.deepcopy` of the dataset gets an independent copy of the values.
"""
from __future__ import annotations

import numpy as np
import torch

from corgi_io.errors import ArgumentError

_GENERATION, _EPOCH, _HAS_COST_MODEL = range(3)


class SharedEpoch:
    """(epoch, cost model) published by the main process and read by each worker as it starts an epoch.

    A generation counter tells a copy whether anything was published since it last looked,
    so a value that a copy set on its own (without `publish`) stays until the next publish.
    Only the main process publishes; the DataLoader's index queue orders its writes at
    `set_epoch` before the workers' reads at the start of the next epoch.
    """

    def __init__(self, world_size: int):
        self._header = torch.zeros(3, dtype=torch.int64).share_memory_()
        self._cost_model = torch.zeros((world_size, 2), dtype=torch.float64).share_memory_()
        self._seen = 0  # the generation whose values this copy holds

    def publish(self, epoch: int, cost_model) -> None:
        """Make `epoch` and `cost_model` ((world_size, 2) floats, or None) what every copy reads next."""
        header = self._header.numpy()
        if cost_model is not None:
            values = np.asarray(cost_model, dtype=np.float64)
            if values.shape != self._cost_model.shape:
                raise ArgumentError(f"cost model of shape {values.shape}: expected one (a, b) per rank, "
                                    f"{tuple(self._cost_model.shape)}")
            self._cost_model.numpy()[...] = values
        header[_EPOCH], header[_HAS_COST_MODEL] = epoch, cost_model is not None
        header[_GENERATION] += 1  # last, after the values it announces
        self._seen = int(header[_GENERATION])

    def latest(self, epoch: int, cost_model) -> tuple:
        """(epoch, cost model) published since this copy last looked; else the given (epoch, cost_model).

        The cost model comes back as a list of [a, b] per rank, as `gather_cost_models` returns it.
        """
        header = self._header.numpy()
        generation = int(header[_GENERATION])
        if generation == self._seen:
            return epoch, cost_model
        self._seen = generation
        published = self._cost_model.numpy().tolist() if header[_HAS_COST_MODEL] else None
        return int(header[_EPOCH]), published

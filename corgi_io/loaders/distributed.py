"""Where this process stands in distributed training: rank, world size and DataLoader worker."""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

from corgi_io.errors import ArgumentError
from corgi_io.schedule import fit_cost

_warned_static_fallback = False


def rank_and_world(rank=None, world_size=None) -> tuple:
    """(rank, world_size) from an initialised torch.distributed group, else the arguments (`Ranks`, checked when
    made), else (0, 1).

    Without a process group both are given or neither (`world_size=1` alone is rank 0 of 1): a
    rank alone, or a world of several without the rank, would make every process the same rank.
    """
    if dist.is_available() and dist.is_initialized():
        found = dist.get_rank(), dist.get_world_size()
        if (rank is not None and rank != found[0]) or (world_size is not None and world_size != found[1]):
            raise ArgumentError(f"rank={rank}, world_size={world_size} disagree with torch.distributed "
                                f"(rank {found[0]} of {found[1]})")
        return found
    if rank is not None and world_size is None:
        raise ArgumentError(f"rank={rank} needs world_size= (torch.distributed is not initialised, so the "
                            "number of ranks is not known)")
    if rank is None and world_size not in (None, 1):
        raise ArgumentError(f"world_size={world_size} needs rank= (torch.distributed is not initialised, so "
                            "this process's rank is not known)")
    return rank or 0, world_size or 1


def worker_and_count() -> tuple:
    """(worker id, number of workers) of the current DataLoader worker; (0, 1) in the main process."""
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def gather_floats(values, world_size: int):
    """Every rank's vector of floats (the same length on all), as a (world_size, n) array on every rank; None
    without an initialised process group.  A tensor collective, not `all_gather_object`: nothing is unpickled.
    Every rank must call it (a collective); on an NCCL group the tensors travel on this rank's CUDA device."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    local = torch.as_tensor(np.asarray(values, dtype=np.float64), device=device)
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local)
    return torch.stack(gathered).cpu().numpy()


def gather_cost_models(local, world_size: int):
    """Every rank's fitted (a, b), gathered on all ranks (`gather_floats`); None if any rank has none.

    Returns None without an initialised process group (the caller falls back to static balance).
    """
    gathered = gather_floats([np.nan, np.nan] if local is None else list(local), world_size)
    if gathered is None or np.isnan(gathered).any():
        return None
    return gathered.tolist()


class StepLog:
    """This rank's observed training steps since the last epoch boundary, for balance="dynamic"."""

    def __init__(self):
        self.columns = ([], [], [])  # per step: size sum, samples, seconds

    def add(self, seconds: float, sizes) -> None:
        """One step: its wall time and the sizes of its batch."""
        sizes = sizes.tolist() if hasattr(sizes, "tolist") else list(sizes)
        for column, value in zip(self.columns, (sum(sizes), len(sizes), float(seconds))):
            column.append(value)

    def agree(self, world_size: int):
        """Every rank's (a, b) fitted from its own steps, the same on all ranks, and a new log for the next epoch;
        None (size balance this epoch, warned once per process) without a process group or fits."""
        global _warned_static_fallback
        cost_model = gather_cost_models(fit_cost(*self.columns), world_size)
        self.columns = ([], [], [])
        if cost_model is None and world_size > 1 and not _warned_static_fallback:
            _warned_static_fallback = True
            warnings.warn("balance='dynamic' has no process group or no measured steps yet; "
                          "using static size balance this epoch", stacklevel=3)
        return cost_model

"""Where this process stands in distributed training: rank, world size and DataLoader worker."""
from __future__ import annotations

import warnings

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


def gather_cost_models(local, world_size: int):
    """Every rank's fitted (a, b), gathered on all ranks with `all_gather_object`; None if any rank has none.

    Returns None without an initialised process group (the caller falls back to static balance).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return None
    gathered = [None] * world_size
    dist.all_gather_object(gathered, local)
    return None if any(g is None for g in gathered) else [list(g) for g in gathered]



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

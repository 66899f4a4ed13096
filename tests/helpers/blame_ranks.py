"""Launched by tests/loaders/test_stage_blame.py under `torchrun --nproc_per_node=3`: one slow rank in a gloo group.

    blame_ranks.py PACK OUT SLOW_RANK

Each rank reads its share of PACK (one fork DataLoader worker, batches of 4) with a transform of 2 ms per sample,
20 ms on SLOW_RANK, inside `ds.stats.watch`; then `set_epoch(1)` ends epoch 0: the ranks gather their paths and
rank 0 logs the straggler on logger "corgi_io" (to stderr here).  Each rank writes its `stats.last_epoch` to
OUT/rank<r>.json.
"""
import functools
import json
import logging
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from corgi_io.loaders import Batches, CorgiPileDataset, Reading


def sleeping(seconds: float, data):
    time.sleep(seconds)
    return data


def main():
    pack_root, out, slow = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = CorgiPileDataset(pack_root, batching=Batches(4), reading=Reading(timing="stages"),
                          transform=functools.partial(sleeping, 0.02 if rank == slow else 0.002))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1, timeout=60)
    ds.set_epoch(0)
    for _ in ds.stats.watch(loader):
        pass
    ds.set_epoch(1)
    (out / f"rank{rank}.json").write_text(json.dumps(ds.stats.last_epoch))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

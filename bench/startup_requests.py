"""Requests a rank makes to an HTTP server before its first batch, and over an epoch (issue 31 §1).

Packs of --sizes samples of 10-byte texts (a WebDataset tar packed with the default options: blocks of 1024
samples) are served by nginx on 127.0.0.1.  Each rank is a fresh process that makes
`CorgiPileDataset(url, ranks=Ranks(rank, W), batching=Batches(32))` and takes one batch; nginx's access log
counts its requests: all of them, the metadata ones (anything but a shard: head, columns, HEADs), their
bytes, and the shard reads.  Then rank 0 of W = 8 reads a whole epoch.

    python bench/startup_requests.py [--sizes 20000,1000000] [--worlds 8,64] [--tree PATH]

--tree runs another checkout's corgi_io (packing and reading), e.g. the commit before the row groups, for the
"before" lines:  git worktree add /tmp/before <commit> && python bench/startup_requests.py --tree /tmp/before
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

CHILD = """
import sys
from corgi_io.loaders import Batches, CorgiPileDataset, Ranks
url, rank, world, epoch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "epoch"
ds = CorgiPileDataset(url, ranks=Ranks(rank=rank, world_size=world), batching=Batches(32))
batches = iter(ds)
print(sum(len(b["data"]) for b in batches) if epoch else len(next(batches)["data"]))
"""
PACK = """
import sys
from corgi_io.packing import PackOptions, pack
pack(sys.argv[1], sys.argv[2], PackOptions(), workers=2, progress=False)
"""


def run(tree: Path, code: str, *args) -> str:
    """Run `code` in a fresh Python whose corgi_io is `tree`'s; its stdout."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          check=False, cwd=tree)  # not this folder: `python -c` imports from its working folder first
    if done.returncode:
        sys.exit(f"startup_requests: a child failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip()


def counted(server, prefix: str, since: int) -> tuple:
    """(requests, metadata requests, metadata bytes, shard requests) logged for `prefix` after `since` lines."""
    logged = [r for r in server.requests()[since:] if r[1].startswith(prefix)]
    metadata = [r for r in logged if not r[1].rsplit("/", 1)[-1].startswith("shard-")]
    return len(logged), len(metadata), sum(r[3] for r in metadata), len(logged) - len(metadata)


def measure(server, tree: Path, work: Path, n: int, worlds: list) -> None:
    from helpers.source_shards import text_tar

    name = f"pack-{n}"
    text_tar(work / f"{name}.tar", n)
    run(tree, PACK, work / f"{name}.tar", server.root / name)
    url, prefix = server.url + name, f"/{name}/"
    for world in worlds:
        for rank in (0, world - 1):
            since = len(server.requests())
            run(tree, CHILD, url, rank, world, "batch")
            total, meta, nbytes, shards = counted(server, prefix, since)
            print(f"startup {n:>9} samples  W={world:<3} rank {rank:<3} before the first batch: {total:4d} requests, "
                  f"{meta:4d} metadata ({nbytes / 1e6:6.2f} MB), {shards:3d} shard reads")
    since = len(server.requests())
    samples = run(tree, CHILD, url, 0, 8, "epoch")
    total, meta, nbytes, shards = counted(server, prefix, since)
    print(f"epoch   {n:>9} samples  W=8   rank 0   a whole epoch ({samples} samples): {total:5d} requests, "
          f"{meta:4d} metadata ({nbytes / 1e6:6.2f} MB), {shards:4d} shard reads")


def main() -> None:
    from helpers.http_server import NginxServer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20000,1000000")
    parser.add_argument("--worlds", default="8,64")
    parser.add_argument("--tree", type=Path, default=HERE.parent)
    args = parser.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    with tempfile.TemporaryDirectory() as work, NginxServer(Path(work) / "www") as server:
        print(f"# {args.tree}: packs of 10-byte texts over nginx on 127.0.0.1, each rank a fresh process, batch 32")
        for n in (int(size) for size in args.sizes.split(",")):
            measure(server, args.tree.resolve(), Path(work), n, worlds)


if __name__ == "__main__":
    main()

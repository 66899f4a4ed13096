"""The pack journey: corpus walk -> size probes -> plan -> execute (process pool) -> manifest.

`pack` and `PackOptions` are the public face (also exported by `corgi_io`); the modules are:
corpus (walking SOURCE), sizing (size probes), layout (blocks and shards), encode and shard_file
(the worker side), output (OUTPUT's states), worker_pool (processes that die with the pack) and
pipeline (`pack` itself).
"""
from corgi_io.packing.pipeline import PackOptions, pack

__all__ = ["PackOptions", "pack"]

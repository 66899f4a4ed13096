"""The pack journey: corpus walk -> plan -> execute -> manifest (see pipeline.py for the whole story).

`pack` and `PackOptions` are the public face (also exported by `corgi_io`).  One job per module:

* walk.py, grouping.py, corpus.py, keys.py, spool.py - streaming SOURCE into compact numpy columns of samples, unique keys;
* sizing.py - size probes; layout.py and plan.py - pure planning (order, blocks, shards, todo);
* table.py - the samples in pack order, which the tasks read; encode.py, shard_file.py, records.py -
  the task that writes one whole shard and its record;
* sample.py - the pack-time sample (key, label, fields); user_code.py - a user's MODULE:FUNCTION;
* sources/ - readers of existing tars, TFRecords, Parquet and JSONL as samples (not yet behind `corgi pack`);
  transforms/ - resize, tokenise, map, filters, dedup on samples (not yet behind `corgi pack`);
* executors.py - where tasks run (on `corgi_io.processes` or Dask); output.py - OUTPUT's states; progress.py - the
  one progress line; columns.py - the manifest's columns, one at a time; pipeline.py - `pack`.
"""
from corgi_io.packing.pipeline import pack
from corgi_io.packing.plan import PackOptions

__all__ = ["PackOptions", "pack"]

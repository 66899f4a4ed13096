"""The pack journey: corpus walk -> plan -> execute -> manifest (see pipeline.py for the whole story).

`pack` and `PackOptions` are the public face (also exported by `corgi_io`).  One job per module:

* walk.py, grouping.py, corpus.py, keys.py, spool.py - streaming SOURCE into compact numpy columns of samples, unique keys;
* sizing.py - size probes; layout.py and pack_plan.py - pure planning (order, blocks, shards, todo);
* table.py - the samples in pack order, which the tasks read; encode.py, shard_file.py, records.py -
  the task that writes one whole shard and its record;
* sample.py - the pack-time sample (key, label, fields); user_code.py - a user's MODULE:FUNCTION;
  regular_files.py - reading one input file safely; field_masks.py - each task's field names and masks;
* sources/ - readers of existing tars, TFRecords, Parquet and JSONL, one unit at a time; unit_pipeline.py,
  unit_writer.py, unit_records.py, unit_manifest.py, sample_rules.py - packing them, a task per unit;
* transforms/ - resize, tokenise, map, filters, dedup on samples; dedup_pass.py - --dedup's hashing pass;
* executors.py - where tasks run (on `corgi_io.processes` or Dask); output.py - OUTPUT's states; progress_bar.py - the
  one progress line; columns.py - the manifest's columns, one at a time; pipeline.py - `pack`.
"""
from corgi_io.packing.pipeline import pack
from corgi_io.packing.pack_plan import PackOptions

__all__ = ["PackOptions", "pack"]

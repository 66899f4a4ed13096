"""The pack journey: corpus walk -> plan -> execute -> manifest (see pipeline.py for the whole story).

`pack` and `PackOptions` are the public face (also exported by `corgi_io`).  One job per module:

* planning.py - every SOURCE listed as units: a folder's or listing's walk (walk.py, grouping.py, corpus.py,
  keys.py, spool.py), pure plan (layout.py, pack_plan.py) and pack-order table (table.py), or the units of
  existing shards and tables;
* sources/ - one module per SOURCE form (folder.py: a planned shard; stream.py over wds, tfrecord, parquet,
  jsonl readers), forms.py (which form), unit_list.py (listing units), values.py (what readers share);
* unit_task.py - the one worker path of every sample: sample_rules.py (input rules, OutputRules), transforms/
  (resize, tokenise, map, filters, dedup), field_masks.py, shard_writer.py (blocks, CRC, shards; shard_file.py)
  and records.py (a unit's record); dedup_pass.py - --dedup's hashing pass over the same units;
* sizing.py - size probes; sample.py - the pack-time sample; user_code.py - a user's MODULE:FUNCTION;
  regular_files.py - reading one input file safely; skip_reasons.py - skip texts and warnings;
* executors.py - where tasks run (on `corgi_io.processes` or Dask); output.py - OUTPUT's states; progress_bar.py - the
  one progress line; manifest_columns.py - the manifest's columns, one at a time; pipeline.py - `pack`.
"""
from corgi_io.packing.pipeline import pack
from corgi_io.packing.pack_plan import PackOptions

__all__ = ["PackOptions", "pack"]

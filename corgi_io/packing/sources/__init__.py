"""Every SOURCE form as units of samples: one module per form, and what they share.

* forms.py - which form a SOURCE is (`detect`, `source_form`), the `SOURCE_MODULES` registry;
* unit_list.py - the units of a SOURCE of shards or tables (`Unit`, `list_units`, `read_unit`);
* values.py - what the readers share (key, label and mapping checks, `skip_or_raise`, `open_binary`);
* wds.py, tfrecord.py, parquet.py (parquet_pages.py), jsonl.py - one reader per form;
* folder.py - a folder or listing: its planned shards as units, their samples read from the table.
"""

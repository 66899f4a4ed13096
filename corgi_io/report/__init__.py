"""What `corgi stats`, `corgi verify` and `corgi plan` show, without any CLI code.

* `stats`  - counts and size distributions of a pack;
* `plot`   - the size histogram and block sizes as a PNG (matplotlib, optional);
* `plan`   - an epoch's plan explained: per-rank steps, balance, workers;
* `verify` - every shard byte checked against the manifest (`corgi_io.verify`).
"""

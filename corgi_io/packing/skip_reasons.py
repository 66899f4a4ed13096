"""Why an input is skipped, and the warning line that says so: the texts every part of `corgi pack` shares.

The folder walk (grouping.py), the file reader (regular_files.py), the sample rules (sample_rules.py) and the
driver (pipeline.py) word a skip, a reserved field name and an empty corpus the same way from here."""
from __future__ import annotations

import stat
import sys

from tqdm import tqdm

from corgi_io.errors import CorpusError
from corgi_io.formats import RESERVED_FIELDS

MAX_WARNINGS = 20  # skipped inputs warned one line each; the rest are counted in one line
_FILE_TYPES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))
# Names no field but the primary may take: the shard formats' own (formats.RESERVED_FIELDS: the label member cls,
# the TFRecord features, the loader's sample keys) and `source`, which a blend gives each sample it loads.
RESERVED_NAMES = RESERVED_FIELDS | {"source"}
# The primary is loaded as `data` and named by `ext`, so it may take those names, but not the label member's.
RESERVED_PRIMARY = frozenset({"cls"})


def not_regular_reason(mode: int) -> str:
    """Why a file of this `st_mode` is not packed: only regular files are (FIFOs could block a read forever)."""
    what = next((name for test, name in _FILE_TYPES if test(mode)), "an unknown file type")
    return f"not a regular file ({what})"


def too_large(nbytes: int, most: int | None, limit_name: str = "--max-sample-bytes") -> str | None:
    """Why a file or field of `nbytes` bytes is not packed when it may have at most `most` (`limit_name`: the option
    that sets that limit); None when it fits or `most` is None.  The one size bound of every SOURCE: the folder
    walk's stat (grouping.py), the file reader (regular_files.py) and a unit's fields (sample_rules.py)."""
    if most is None or nbytes <= most:
        return None
    return f"{nbytes:,} bytes, above the limit of {most:,} ({limit_name})"


def empty_corpus(source, skipped: list) -> CorpusError:
    """The error of a SOURCE that leaves no sample to pack: how many inputs were skipped, and the first and why."""
    first = f", first: {skipped[0]['path']}: {skipped[0]['reason']}" if skipped else ""
    every = "every sample was skipped: " if skipped else ""
    return CorpusError(f"{source}: the corpus is empty ({every}{len(skipped)} skipped{first})")


def reserved_reason(name: str) -> str:
    """Why a field may not be named `name` (RESERVED_NAMES; RESERVED_PRIMARY for the primary)."""
    return f"field {name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})"


def unusable_extra(name: str) -> str | None:
    """The reason of the skip record of a field read from SOURCE, other than its sample's primary, that is left out of
    its sample (a reserved name); None when it is packed.  The one rule, and text, of both pipelines (the folder walk:
    `SampleGrouper`; shards and tables: `sample_rules.SampleRules`): its sample is packed without it.  A field with a
    reserved name that --map returns skips the whole sample instead (`sample_rules.check_fields`): the code is wrong."""
    return f"{reserved_reason(name)}: left out, the sample packed without it" if name in RESERVED_NAMES else None


def warn(message: str) -> None:
    """A one-line warning on stderr that does not break a progress bar."""
    tqdm.write(f"corgi pack: warning: {message}", file=sys.stderr)

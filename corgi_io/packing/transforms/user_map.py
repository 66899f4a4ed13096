"""`UserMap`: a user's function ``module:function`` gives each sample its new fields, or drops it.

The function is called as ``function(fields, key)`` with a copy of the sample's fields ({name:
bytes}) and its key, and returns the sample's new fields, a dict {name: bytes} that replaces the
old one whole (so it may add, replace, rename or remove fields: ``{**fields, "caption.txt": b"..."}``
adds one), or None to drop the sample (a skip record, never fatal).  A bytes-like value (bytearray,
memoryview) is taken as its bytes.  An exception it raises (SystemExit too: sys.exit in a map stops
that sample, not the pack silently), or a result that is not such a dict, is BadInput naming the
sample: skipped, or fatal under strict.  The label is kept.  What the pack then asks of the fields
(no reserved name, --max-sample-bytes) is checked for every transform alike (`sample_rules`).
Each call is marked as user code, so that the pack's --map-timeout can stop a call that hangs.
The module must be importable by every worker (on its sys.path; not ``__main__``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from corgi_io.errors import BadInput, plain_message
from corgi_io.packing.executors import running_user_code
from corgi_io.manifest.fields import check_field_name
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.chain import Drop, Kept
from corgi_io.packing.user_code import load_function


@dataclass(frozen=True)
class UserMap:
    """Map each sample's fields with the function `function` names (``module:function``); None drops it.

    The function is imported once here (a PackError at once if it cannot be), and once more per
    worker process on first use: the function itself is never pickled, only its name.
    """

    name: ClassVar[str] = "map"
    function: str
    _function: object = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_function", load_function(self.function, "map"))

    def __getstate__(self) -> dict:
        """Only the name: a worker imports the function itself."""
        return {"function": self.function}

    def options(self) -> dict:
        """The JSON-able options (the manifest records them)."""
        return {"function": self.function}

    def __call__(self, sample: PackSample) -> Kept | Drop:
        """The sample with the fields the function returned, or a Drop when it returned None."""
        if self._function is None:
            object.__setattr__(self, "_function", load_function(self.function, "map"))
        try:
            with running_user_code():
                fields = self._function(dict(sample.fields), sample.key)
        except (Exception, SystemExit) as exc:  # a user function may raise anything: the sample is bad
            raise BadInput(f"sample {sample.key!r}: {self.function} raised {plain_message(exc)}") from None
        if fields is None:
            return Drop(sample.key, f"{self.function} returned None")
        if not isinstance(fields, dict):
            raise BadInput(f"sample {sample.key!r}: {self.function} returned {type(fields).__name__}, not a dict of fields")
        for name in fields:
            try:
                check_field_name(name)
            except BadInput as exc:
                raise BadInput(f"sample {sample.key!r}: {self.function} returned {exc}") from None
        fields = {name: value if isinstance(value, bytes) or not isinstance(value, (bytearray, memoryview))
                  else bytes(value) for name, value in fields.items()}
        return Kept(PackSample(sample.key, sample.label, fields))  # checks bytes values and a field at least

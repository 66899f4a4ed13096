"""`Tokenize`: a text field's token ids, added as a ``tokens.npy`` field, with a local `tokenizers` JSON file.

The ids are a little-endian uint16 array when every id of the vocabulary fits (below 65,536), else
uint32, written with `numpy.lib.format` (no pickle: `np.load(io.BytesIO(b))` reads it with the
default allow_pickle=False, and stock webdataset's ``.npy`` decoder does the same).  The tokenizer
file is read from the local disk only (never the Hugging Face hub), once in the driver to check it
and fix the dtype, then once per worker process on first use (cached on the object, not pickled),
where its SHA-256 must still be the one recorded, and the bytes hashed are the bytes loaded.  Only a
regular file of at most `MAX_TOKENIZER_BYTES` is read: a FIFO (which would block the pack forever), a
device or a larger file is a PackError, unread.  Needs ``pip install 'corgi-io[text]'``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from corgi_io.arguments import check_flag, choose
from corgi_io.errors import BadInput, PackError, plain_message
from corgi_io.packing.regular_files import read_regular_file
from corgi_io.manifest.fields import check_field_name
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.chain import Kept, checking_options

TOKENS_FIELD = "tokens.npy"
TOKEN_DTYPES = {"uint16": "<u2", "uint32": "<u4"}
UINT16_IDS = 1 << 16
MAX_TOKENIZER_BYTES = 1 << 30  # a tokenizer JSON file read whole (the hub's largest are tens of MB)


@dataclass(frozen=True)
class Tokenize:
    """Tokenise field `field` (UTF-8) and add its ids as field ``tokens.npy``; drop the text with `drop_text`.

    `dtype`: "uint16", "uint32", or None (the smaller that holds every id of the vocabulary); a
    dtype too small for the vocabulary is a PackError.  `sha256`: None, or the file's SHA-256 as
    `options()` recorded it (then another file is a PackError), so `build_chain(chain.options())`
    rebuilds the same transform.  The token count is the size of
    ``tokens.npy`` (and of the text field, when kept) in `Kept.sizes`.  A sample without the field,
    with text that is not UTF-8, or with a ``tokens.npy`` field already, is BadInput.
    """

    name: ClassVar[str] = "tokenize"
    tokenizer_file: str
    field: str = "txt"
    dtype: str | None = None
    drop_text: bool = False
    add_special_tokens: bool = False
    sha256: str | None = None
    _tokenizer: object = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        with checking_options(self.name):
            check_flag("drop_text", self.drop_text)
            check_flag("add_special_tokens", self.add_special_tokens)
            if self.dtype is not None:
                choose("dtype", self.dtype, TOKEN_DTYPES)
        try:
            check_field_name(self.field)
        except BadInput as exc:
            raise PackError(f"{self.name}: {exc}") from None
        data = read_tokenizer_file(self.tokenizer_file)
        sha256 = hashlib.sha256(data).hexdigest()
        if self.sha256 is not None and self.sha256 != sha256:
            raise PackError(f"tokenizer {self.tokenizer_file!r} is not the one recorded (SHA-256 differs)")
        tokenizer = load_tokenizer(self.tokenizer_file, data)
        ids = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=0) + 1
        if self.dtype == "uint16" and ids > UINT16_IDS:
            raise PackError(f"tokenizer {self.tokenizer_file!r} has ids up to {ids - 1:,}: dtype uint16 cannot hold them")
        object.__setattr__(self, "dtype", self.dtype or ("uint16" if ids <= UINT16_IDS else "uint32"))
        object.__setattr__(self, "sha256", sha256)
        object.__setattr__(self, "_tokenizer", tokenizer)

    def __getstate__(self) -> dict:
        """The options and the file's hash: a worker loads the tokenizer itself, once."""
        return {name: value for name, value in self.__dict__.items() if name != "_tokenizer"}

    def options(self) -> dict:
        """The JSON-able options (with the resolved dtype and the file's SHA-256, which the manifest records)."""
        return {"tokenizer_file": self.tokenizer_file, "field": self.field, "dtype": self.dtype,
                "drop_text": self.drop_text, "add_special_tokens": self.add_special_tokens, "sha256": self.sha256}

    def __call__(self, sample: PackSample) -> Kept:
        """The sample with ``tokens.npy`` added (and the text dropped with `drop_text`); sizes: the token count."""
        data = sample.fields.get(self.field)
        if data is None:
            raise BadInput(f"sample {sample.key!r} has no field {self.field!r} to tokenise")
        if TOKENS_FIELD in sample.fields:
            raise BadInput(f"sample {sample.key!r} has a field {TOKENS_FIELD!r} already")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"sample {sample.key!r}: field {self.field!r} is not UTF-8 text (byte {exc.start})") from None
        ids = self._loaded().encode(text, add_special_tokens=self.add_special_tokens).ids
        fields = {name: value for name, value in sample.fields.items() if not (self.drop_text and name == self.field)}
        fields[TOKENS_FIELD] = npy_bytes(np.array(ids, dtype=TOKEN_DTYPES[self.dtype]))
        sizes = {TOKENS_FIELD: len(ids), **({} if self.drop_text else {self.field: len(ids)})}
        return Kept(PackSample(sample.key, sample.label, fields), sizes)

    def _loaded(self):
        """The tokenizer, loaded on first use in this process; PackError if the file changed since the driver read it."""
        if self._tokenizer is None:
            data = read_tokenizer_file(self.tokenizer_file)
            if hashlib.sha256(data).hexdigest() != self.sha256:
                raise PackError(f"tokenizer {self.tokenizer_file!r} changed since the pack began (SHA-256 differs)")
            object.__setattr__(self, "_tokenizer", load_tokenizer(self.tokenizer_file, data))
        return self._tokenizer


def load_tokenizer(path: str, data: bytes):
    """A `tokenizers.Tokenizer` from the JSON `data` of the file at `path`; PackError naming the file if it cannot
    be loaded."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PackError("tokenize needs the tokenizers library: pip install 'corgi-io[text]'") from None
    try:
        return Tokenizer.from_buffer(data)
    except Exception as exc:  # tokenizers raises plain Exceptions for a malformed file
        raise PackError(f"tokenizer {path!r} cannot be loaded: {plain_message(exc)}") from None


def read_tokenizer_file(path: str) -> bytes:
    """The bytes of the tokenizer file at `path`; PackError, with nothing read, unless it is a regular file of at
    most MAX_TOKENIZER_BYTES (`read_regular_file` opens it without blocking and checks what it opened)."""
    try:
        return read_regular_file(path, MAX_TOKENIZER_BYTES, limit_name="the tokenizer file limit")
    except BadInput as exc:  # a FIFO, a device, a file too large or that grew: unread
        raise PackError(f"tokenizer {path!r}: {exc}") from None
    except OSError as exc:
        raise PackError(f"tokenizer {path!r} cannot be read: {plain_message(exc)}") from None


def npy_bytes(array: np.ndarray) -> bytes:
    """`array` in ``.npy`` format (header and data, never a pickle), as `np.save` would write it."""
    out = io.BytesIO()
    np.lib.format.write_array(out, array, allow_pickle=False)
    return out.getvalue()

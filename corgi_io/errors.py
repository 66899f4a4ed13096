"""The one error hierarchy of corgi-io.

Every error that corgi-io raises on purpose is a :class:`CorgiError`; its message is one
line that names the file (and, where it has one, the byte offset and the sample key).
The CLI prints such errors as one line with a non-zero exit; anything else is a bug and
keeps its traceback.  Each class also derives from the built-in exception that callers
caught before the hierarchy existed (ValueError, RuntimeError, OSError), so that code
written against those keeps working.

    CorgiError
    ├── ManifestError     a manifest that is missing, malformed or inconsistent
    ├── FormatError       shard bytes that do not parse (carries the byte offset)
    ├── CorpusError       a SOURCE that cannot become a corpus
    │   └── BadInput      one input file that cannot be packed (skipped, or fatal under --strict)
    ├── PackError         a pack that cannot proceed
    ├── CorruptDataError  bytes read by the loader that fail their checksum or their shard's size
    ├── DecodeError       a sample whose checked bytes its decoder cannot or will not decode (wrong kind,
    │                     above max_pixels, a broken body): not corruption, so not a CorruptDataError
    ├── ResumeError       a saved loader state that does not fit this dataset
    ├── BatchError        samples that do not collate into one batch (names the sample's key)
    ├── ArgumentError     an argument of the wrong type or out of range, named (also a ValueError and
    │                     a TypeError, so `except ValueError` and `except TypeError` code keeps working)
    └── StorageError      a read or write that failed (also an OSError)
"""
from __future__ import annotations

import re

_OBJECT_REPR = re.compile(r"\s*<[^<>]* (?:object )?at 0x[0-9a-fA-F]+>")


class CorgiError(Exception):
    """Base of every error corgi-io raises on purpose; the message is one line."""


class ManifestError(CorgiError, ValueError):
    """A manifest that is missing, of an unsupported version, malformed, or inconsistent with itself."""


class FormatError(CorgiError, ValueError):
    """Shard bytes that do not parse; `offset` is the absolute byte offset of the problem."""

    def __init__(self, offset: int, message: str):
        super().__init__(f"byte offset {offset}: {message}")
        self.offset = offset


class CorpusError(CorgiError, ValueError):
    """SOURCE cannot be turned into a corpus: missing, empty, or a malformed listing."""


class BadInput(CorpusError):
    """One input file that cannot be packed; the message says why in plain text."""


class PackError(CorgiError, RuntimeError):
    """The pack cannot proceed (strict mode hit a bad file, OUTPUT holds something else, a write failed)."""


class _Located:
    """`shard`, `offset` and `key` of the sample an error is about (any may be None when unknown)."""

    def __init__(self, message: str, *, shard: str | None = None, offset: int | None = None, key: str | None = None):
        super().__init__(message)
        self.shard, self.offset, self.key = shard, offset, key


class CorruptDataError(_Located, CorgiError, ValueError):
    """Bytes that the loader read but cannot trust: a checksum mismatch or a resized shard.

    `shard`, `offset` and `key` locate the first bad sample (any may be None when unknown).
    """


class DecodeError(_Located, CorgiError, ValueError):
    """A sample whose bytes passed their checks but that its decoder cannot or will not decode.

    A sample of another kind than the decoder's, an image above `max_pixels`, or a body its
    library cannot decode.  The dataset's message names the shard, byte offset and key (also in
    `shard`, `offset`, `key`); a decoder called on its own raises it with the reason only.
    Not a CorruptDataError: the bytes are the ones packed, and `on_error="skip"` may drop them.
    """


class ResumeError(CorgiError, ValueError):
    """A saved loader state that cannot resume this dataset: another pack, seed, shuffle or batch size."""


class BatchError(CorgiError, ValueError):
    """Samples that cannot form one batch (shapes or types that do not stack); names the sample's key."""


class ArgumentError(CorgiError, ValueError, TypeError):
    """An argument of the wrong type or out of range; the message names the argument and the value given."""


class StorageError(CorgiError, OSError):
    """A read or write that failed or came back short; the message names the file and offset."""


def plain_message(exc: BaseException) -> str:
    """`Type: message` of a foreign exception as plain text for a one-line error: its first line, with
    object reprs such as `<_io.BytesIO object at 0x7f...>` (which name nothing a user knows) removed:
    `UnidentifiedImageError: cannot identify image file`."""
    lines = str(exc).strip().splitlines()
    text = _OBJECT_REPR.sub("", lines[0]).strip() if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

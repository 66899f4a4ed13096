"""The tokenizer file's limit is named as its own, not as --max-sample-bytes, in one line whether the file is too
large when opened or grows past the limit while it is read (issue 28 review)."""
from __future__ import annotations

import os

import pytest

from corgi_io.errors import PackError
from corgi_io.packing.transforms import tokenize


def test_a_tokenizer_that_grows_while_read_names_the_tokenizer_limit(tmp_path, monkeypatch):
    """Before: 'grew past the limit of 1,000 bytes while it was read (--max-sample-bytes)'."""
    path = tmp_path / "growing.json"
    path.write_bytes(b"{" * 500)
    real_fstat = os.fstat

    def fstat_then_grow(fd):  # the file grows to 2,500 bytes right after the size check
        info = real_fstat(fd)
        with open(path, "ab") as file:
            file.write(b" " * 2000)
        return info

    monkeypatch.setattr(tokenize, "MAX_TOKENIZER_BYTES", 1000)
    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    with pytest.raises(PackError) as error:
        tokenize.read_tokenizer_file(str(path))
    assert str(error.value) == (f"tokenizer {str(path)!r}: grew past the limit of 1,000 bytes while it was read "
                                f"(the tokenizer file limit)")


def test_a_tokenizer_above_the_limit_is_refused_by_the_size_it_was_opened_with(tmp_path, monkeypatch):
    path = tmp_path / "large.json"
    path.write_bytes(b"{" * 1001)
    monkeypatch.setattr(tokenize, "MAX_TOKENIZER_BYTES", 1000)
    with pytest.raises(PackError) as error:
        tokenize.read_tokenizer_file(str(path))
    assert str(error.value) == (f"tokenizer {str(path)!r}: 1,001 bytes, above the limit of 1,000 "
                                f"(the tokenizer file limit)")

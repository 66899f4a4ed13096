"""`corgi pack` refuses options that contradict each other (exit 2, one line) before it reads or writes anything."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("args, message", [
    (("--features", "image=jpg", "--columns", "image=jpg"), "--features maps a TFRecord SOURCE, --columns a table"),
    (("--format", "tfrecord", "--index", "wids"), "--index is for --format wds"),
])
def test_contradicting_pack_options_are_refused_before_anything_is_written(tmp_path, corgi, args, message):
    (tmp_path / "src").mkdir()
    refused = corgi("pack", tmp_path / "src", tmp_path / "out", *args)
    assert refused.exit_code == 2 and message in refused.stderr and refused.stdout == ""
    assert not (tmp_path / "out").exists()

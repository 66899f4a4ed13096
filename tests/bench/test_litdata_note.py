"""Without litdata, the litdata benches say so in one line, with the install line, and still print corgi's numbers."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"
INSTALL = "pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 requests"
# the bench run as __main__ in a process where `import litdata` raises ImportError
WITHOUT_LITDATA = ("import runpy, sys; sys.modules['litdata'] = None; sys.argv = sys.argv[1:]; "
                   "runpy.run_path(sys.argv[0], run_name='__main__')")


def test_import_litdata_note_names_the_install_line(monkeypatch):
    sys.path.insert(0, str(BENCH))
    try:
        import _litdata
    finally:
        sys.path.remove(str(BENCH))
    monkeypatch.setitem(sys.modules, "litdata", None)
    module, note = _litdata.import_litdata()
    assert module is None and note.startswith("# litdata: not importable (ModuleNotFoundError") and note.endswith(INSTALL)


@pytest.mark.slow
def test_pack_resize_without_litdata_prints_the_note_and_corgi(tmp_path):
    result = subprocess.run([sys.executable, "-c", WITHOUT_LITDATA, BENCH / "pack_resize.py", "--n", "6",
                             "--rounds", "1", "--workdir", tmp_path], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    note, comment, corgi = result.stdout.splitlines()
    assert note.startswith("# litdata: not importable") and note.endswith(INSTALL) and comment.startswith("# 6 JPEGs")
    assert re.fullmatch(r"pack-resize corgi pack --image-max-side 256 --workers 2 +\d+ images/s +[\d.]+ MB/s", corgi)

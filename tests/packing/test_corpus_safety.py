"""Safe names and a clear outcome for every input: the key rule, hostile listings, odd file types, plain reasons.

Packs run in process through the `corgi` fixture, except where a hang is the bug under test:
those run `corgi pack` in a subprocess with a timeout.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest

from corgi_io.packing.regular_files import read_regular_file
from corgi_io.packing.corpus import discover
from corgi_io.packing.skip_reasons import MAX_WARNINGS
from corgi_io.packing.walk import key_from_path
from corgi_io.manifest.names import key_problem
from corgi_io.errors import BadInput
from corgi_io.formats import get_format
from corgi_io.manifest import open_manifest
from helpers.corpus_factory import write_image, write_listing, write_text, write_truncated_jpeg, write_video

HANG_TIMEOUT_S = 30
PLAIN_TEXT = re.compile(r"^[^<>\n]*$")  # no object repr such as <_io.BytesIO object at 0x7f...>, one line


def warnings_of(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("corgi pack: warning:")]


def write_jsonl(path: Path, rows) -> None:
    """JSONL with ASCII escapes, so that rows may hold lone surrogates (which write_listing cannot write)."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def corgi_subprocess(*args, timeout=HANG_TIMEOUT_S):
    """`corgi ARGS` in a fresh interpreter that gets killed after `timeout` seconds (a hang fails the test)."""
    code = "import sys; from corgi_io.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


# --- the key rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("key,problem", [
    ("", "empty"), ("/abs/x", "'/'"), ("../../x", "'..'"), ("a/./b/../c", "'.'"), ("a//b/", "empty component"),
    ("a/", "empty component"), ("new\nline", "control"), ("bell\x07", "control"), ("c1\x85", "control"),
    ("caf\udce9", "UTF-8"), ("lone\ud800", "UTF-8"),
])
def test_key_rule_names_the_problem(key, problem):
    assert problem in key_problem(key)


@pytest.mark.parametrize("key", ["a", "a/b/c", "fête/ñandú", "...", "a/.hidden", "sp ace/x"])
def test_key_rule_accepts_plain_relative_paths(key):
    assert key_problem(key) is None


def test_key_from_path_is_injective_and_obeys_the_rule():
    """Percent-decoding a key gives back the exact bytes of the path, so distinct paths never share a key."""
    stems = ["a/b", "a/b.c", "a/b%2Ec", "a%/b", "a%25/b", "caf\udce9", "caf%E9", "new\nline", "new%0Aline",
             "x\udcff/y\udcfe.z", "fête.v2/ñ", "50%/a", "\x85c1", "a.b/c"]
    keys = [key_from_path(stem) for stem in stems]
    assert len(set(keys)) == len(stems)
    for stem, key in zip(stems, keys):
        assert key_problem(key) is None, key
        assert "." not in key.rsplit("/", 1)[-1]
        assert unquote_to_bytes(key) == os.fsencode(stem)
    assert key_from_path("cat/dog.v2") == "cat/dog%2Ev2"  # the webdataset escaping is unchanged


# --- hostile listings ------------------------------------------------------------------------

HOSTILE_ROWS = {  # id -> (row, text the warning must show)
    "key-parent": ({"path": "ok.txt", "key": "../../x"}, "'../../x'"),
    "key-absolute": ({"path": "ok.txt", "key": "/abs/x"}, "'/abs/x'"),
    "key-dots": ({"path": "ok.txt", "key": "a/./b/../c"}, "'a/./b/../c'"),
    "key-empty-components": ({"path": "ok.txt", "key": "a//b/"}, "'a//b/'"),
    "key-newline": ({"path": "ok.txt", "key": "new\nline"}, "'new\\nline'"),
    "key-lone-surrogate": ({"path": "ok.txt", "key": "bad\ud800"}, "'bad\\ud800'"),
    "path-parent": ({"path": "../base/ok.txt"}, "'../base/ok'"),
    "path-dots": ({"path": "sub/./x/../ok.txt"}, "'sub/x/../ok'"),
    "path-newline": ({"path": "new\nline.txt"}, "'new\\nline'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ROWS))
def test_hostile_listing_row_is_skipped_with_a_warning_or_fatal_when_strict(tmp_path, corgi, case):
    row, shown = HOSTILE_ROWS[case]
    base = tmp_path / "base"
    write_text(base / "ok.txt", 3)
    write_text(base / "good.txt", 4)
    write_jsonl(base / "list.jsonl", [{"path": "good.txt"}, row])
    result = corgi("pack", base / "list.jsonl", tmp_path / "out", "--workers", "1")
    assert result.exit_code == 0, result.output
    (warning,) = warnings_of(result.stderr)
    assert "line 2" in warning and shown in warning, warning
    m = open_manifest(tmp_path / "out")
    assert m.keys() == ["good"]
    assert len(list(m.skip_records())) == 1 and list(m.skip_records())[0]["reason"].startswith("line 2: key ")

    strict = corgi("pack", base / "list.jsonl", tmp_path / "strict", "--workers", "1", "--strict")
    assert strict.exit_code == 1
    (line,) = strict.stderr.strip().splitlines()
    assert "list.jsonl" in line and "line 2" in line and shown in line, line
    assert not (tmp_path / "strict" / "manifest.json").exists()


def test_csv_listing_row_lines_and_absolute_paths(tmp_path, corgi):
    """CSV lines count the header; an absolute path is read where it points and keyed without its '/'."""
    outside = tmp_path / "elsewhere" / "far.txt"
    write_text(outside, 5)
    write_text(tmp_path / "base" / "ok.txt", 3)
    listing = tmp_path / "base" / "list.csv"
    write_listing(listing, [{"path": str(outside)}, {"path": "ok.txt", "key": "../up"}, {"path": "./ok.txt"}])
    result = corgi("pack", listing, tmp_path / "out", "--workers", "1", "--order", "keep")
    assert result.exit_code == 0, result.output
    (warning,) = warnings_of(result.stderr)
    assert "line 3" in warning and "'../up'" in warning
    m = open_manifest(tmp_path / "out")
    assert m.keys() == [str(outside)[1:-4], "ok"]


def test_missing_and_non_regular_listing_rows_are_warned_and_fatal_when_strict(tmp_path, corgi):
    base = tmp_path / "base"
    write_text(base / "ok.txt", 3)
    (base / "folder.txt").mkdir()
    write_listing(base / "list.jsonl", ["ok.txt", "gone.txt", "folder.txt"], fmt="jsonl")
    result = corgi("pack", base / "list.jsonl", tmp_path / "out", "--workers", "1")
    assert result.exit_code == 0, result.output
    gone, folder = warnings_of(result.stderr)
    assert "gone.txt" in gone and "line 2" in gone and "No such file" in gone
    assert "folder.txt" in folder and "line 3" in folder and "not a regular file (a folder)" in folder
    assert [s["path"] for s in list(open_manifest(tmp_path / "out").skip_records())] == ["gone.txt", "folder.txt"]

    strict = corgi("pack", base / "list.jsonl", tmp_path / "strict", "--workers", "1", "--strict")
    assert strict.exit_code == 1
    (line,) = strict.stderr.strip().splitlines()
    assert "list.jsonl" in line and "line 2" in line and "gone.txt" in line


@pytest.mark.parametrize("name,content,words", [
    ("list.jsonl", b'{"path": "a.txt"}\n\n{"path": oops}\n', ("line 3", "not JSON")),
    ("list.jsonl", b'{"path": 5}\n', ("line 1", "'path' is not a string")),
    ("list.csv", b"path\n\xff.txt\n", ("not UTF-8",)),
])
def test_malformed_listing_is_a_one_line_error(tmp_path, corgi, name, content, words):
    write_text(tmp_path / "a.txt", 3)  # listings stream: rows before the bad line are walked (and must exist)
    (tmp_path / name).write_bytes(content)
    result = corgi("pack", tmp_path / name, tmp_path / "out")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert name in line and all(word in line for word in words), line


# --- nothing extracts outside the extraction folder ------------------------------------------

def _hostile_sources(tmp_path: Path) -> list:
    """A listing full of hostile rows, and a folder of awkward file names (newline, non-UTF-8, '%')."""
    base = tmp_path / "base"
    write_text(base / "ok.txt", 3)
    write_jsonl(base / "list.jsonl", [{"path": "ok.txt"}, {"path": str(base / "ok.txt")}]
                + [row for row, _ in HOSTILE_ROWS.values()])
    folder = tmp_path / "folder"
    for i, name in enumerate([b"new\nline.txt", b"caf\xe9.txt", b"50%.txt", b"dots..txt", b"a b.txt"]):
        write_text(os.fsdecode(bytes(folder / "cls") + b"/" + name), 2 + i, seed=i)
    return [base / "list.jsonl", folder]


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_every_written_name_obeys_the_key_rule(tmp_path, corgi, fmt):
    for n, source in enumerate(_hostile_sources(tmp_path)):
        out = tmp_path / f"out{n}"
        assert corgi("pack", source, out, "--format", fmt, "--workers", "1").exit_code == 0
        shard = next(out.glob("shard-*"))
        stored = [record.key for record in get_format(fmt).parse_block(shard.read_bytes())]
        assert sorted(stored) == sorted(open_manifest(out).keys()) and stored
        assert all(key_problem(key) is None for key in stored), stored
        assert corgi("verify", out).exit_code == 0


def _files_under(folder: Path) -> set:
    return {os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files}


@pytest.mark.slow
def test_tar_shards_extract_inside_the_folder(tmp_path, corgi):
    """Python's tarfile with filter="data" and GNU tar both put every member inside the target folder."""
    for n, source in enumerate(_hostile_sources(tmp_path)):
        out = tmp_path / f"out{n}"
        assert corgi("pack", source, out, "--workers", "1").exit_code == 0
        shard = next(out.glob("shard-*.tar"))
        with tarfile.open(shard) as tar:
            members = sorted(member.name for member in tar.getmembers())
            assert all(member.isreg() for member in tar.getmembers())
            tar.extractall(tmp_path / f"py{n}", filter="data")  # raises on a member that would escape
        assert sorted(_files_under(tmp_path / f"py{n}")) == members
        if shutil.which("tar") is None:
            pytest.skip("GNU tar not installed: apt-get install -y tar")
        (tmp_path / f"gnu{n}").mkdir()
        subprocess.run(["tar", "xf", shard, "-C", tmp_path / f"gnu{n}"], check=True, capture_output=True)
        assert sorted(_files_under(tmp_path / f"gnu{n}")) == members
    outside = {p.name for p in tmp_path.iterdir()}
    assert outside == {"base", "folder", "out0", "out1", "py0", "py1", "gnu0", "gnu1"}, outside
    assert not Path("/abs").exists()


# --- folder walks: odd names and odd files ---------------------------------------------------

def test_non_utf8_and_control_names_are_escaped_and_packed(tmp_path, corgi):
    """A folder and files named with bytes that are not UTF-8, newlines and '%': all packed under distinct keys."""
    src = tmp_path / "src"
    folder = os.fsencode(src) + b"/c\xe9/"
    names = {b"caf\xe9.txt": 2, b"caf%E9.txt": 3, b"new\nline.txt": 4, b"new%0Aline.txt": 5, b"\xff\xfe.v1.txt": 6}
    for i, (name, n) in enumerate(names.items()):
        write_text(os.fsdecode(folder + name), n, seed=i)
    Path(os.fsdecode(folder + b"bad\xff.xyz")).write_bytes(b"x")
    out = tmp_path / "out"
    result = corgi("pack", src, out, "--workers", "1")
    assert result.exit_code == 0, result.output
    m = open_manifest(out)
    assert m.labels == ["c\\xe9"]
    assert list(m.skip_records()) == [{"path": "c\\xe9/bad\\xff.xyz", "reason": "unknown extension '.xyz'"}]
    assert all(key_problem(key) is None for key in m.keys())
    stored = {unquote_to_bytes(key): int(size) for key, size in zip(m.keys(), m.samples.size)}
    assert stored == {b"c\xe9/" + name[:-4]: n for name, n in names.items()}  # keys decode to the exact names


@pytest.mark.slow
def test_fifo_socket_device_and_symlinks_in_a_folder_walk(tmp_path, monkeypatch):
    src = tmp_path / "src"
    write_text(src / "a" / "ok.txt", 3)
    write_text(tmp_path / "outside" / "linked.txt", 4)
    os.mkfifo(src / "a" / "x.jpg")
    monkeypatch.chdir(src / "a")  # a socket path must be short
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.jpg")
    os.symlink("loop.txt", src / "a" / "loop.txt")                         # a link to itself
    os.symlink("..", src / "a" / "up")                                      # a folder loop
    os.symlink(tmp_path / "outside" / "linked.txt", src / "a" / "link.txt")  # a link out of SOURCE
    os.symlink("/dev/null", src / "a" / "null.txt")
    try:
        result = corgi_subprocess("pack", src, tmp_path / "out", "--workers", "2")
        strict = corgi_subprocess("pack", src, tmp_path / "strict", "--workers", "1", "--strict")
    finally:
        sock.close()
    assert result.returncode == 0, result.stderr
    m = open_manifest(tmp_path / "out")
    assert sorted(m.keys()) == ["a/link", "a/ok"]
    reasons = {s["path"]: s["reason"] for s in list(m.skip_records())}
    assert reasons == {"a/x.jpg": "not a regular file (a FIFO)", "a/sock.jpg": "not a regular file (a socket)",
                       "a/null.txt": "not a regular file (a character device)",
                       "a/loop.txt": "cannot stat: Too many levels of symbolic links",
                       "a/up": "symlink to a folder (not followed)"}
    assert len(warnings_of(result.stderr)) == len(reasons)
    assert strict.returncode == 1
    (line,) = strict.stderr.strip().splitlines()
    assert "not a regular file" in line or "cannot stat" in line


@pytest.mark.slow
def test_fifo_in_a_listing_does_not_hang(tmp_path):
    write_text(tmp_path / "ok.txt", 3)
    os.mkfifo(tmp_path / "pipe.txt")
    write_listing(tmp_path / "list.csv", ["ok.txt", "pipe.txt"])
    result = corgi_subprocess("pack", tmp_path / "list.csv", tmp_path / "out", "--workers", "1")
    assert result.returncode == 0, result.stderr
    (warning,) = warnings_of(result.stderr)
    assert "pipe.txt" in warning and "line 3" in warning and "FIFO" in warning


def _within(seconds, function, *args):
    """function(*args) in a daemon thread; its result or exception, or a failure if it is still running."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function(*args)
        except Exception as exc:  # handed back to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{function.__name__} hung"
    return outcome


def test_a_fifo_swapped_in_after_the_walk_is_never_read(tmp_path, corgi, monkeypatch):
    """The worker's own check: O_NONBLOCK open, then fstat, so neither a FIFO nor a device is read."""
    os.mkfifo(tmp_path / "swapped.jpg")
    outcome = _within(HANG_TIMEOUT_S, read_regular_file, str(tmp_path / "swapped.jpg"))
    assert isinstance(outcome.get("error"), BadInput) and "FIFO" in str(outcome["error"])
    with pytest.raises(BadInput, match="character device"):
        read_regular_file("/dev/zero")
    # a whole pack whose file is swapped for a FIFO between the walk and the shard task
    src = tmp_path / "src"
    write_image(src / "a" / "ok.png", 8, 8)
    write_image(src / "a" / "swapped.png", 8, 8)
    out = tmp_path / "out"
    from corgi_io.packing import planning

    def swap_after_walk(*args, **kwargs):
        found = discover(*args, **kwargs)
        (src / "a" / "swapped.png").unlink()
        os.mkfifo(src / "a" / "swapped.png")
        return found

    monkeypatch.setattr(planning, "discover", swap_after_walk)
    outcome = _within(HANG_TIMEOUT_S, corgi, "pack", src, out, "--workers", "1")
    assert outcome["value"].exit_code == 0, outcome
    m = open_manifest(out)
    assert m.keys() == ["a/ok"] and list(m.skip_records()) == [{"path": "a/swapped.png", "reason": "not a regular file (a FIFO)"}]


# --- plain reasons, capped warnings ----------------------------------------------------------

def test_reasons_are_plain_text(tmp_path, corgi):
    src = tmp_path / "src"
    write_image(src / "a" / "ok.png", 8, 8)
    (src / "a" / "empty.jpg").write_bytes(b"")
    (src / "a" / "void.mp4").write_bytes(b"")  # not empty.mp4: that would be a field of sample a/empty
    (src / "a" / "zeros.png").write_bytes(b"\0" * 64)  # Pillow cannot identify it
    write_truncated_jpeg(src / "a" / "cut.jpg")
    write_video(tmp_path / "whole.avi", 6)
    data = (tmp_path / "whole.avi").read_bytes()
    (src / "a" / "short.avi").write_bytes(data[: len(data) // 3])
    result = corgi("pack", src, tmp_path / "out", "--workers", "1")
    assert result.exit_code == 0, result.output
    reasons = {s["path"]: s["reason"] for s in list(open_manifest(tmp_path / "out").skip_records())}
    assert reasons["a/empty.jpg"] == "empty image file (0 bytes)"
    assert reasons["a/void.mp4"] == "empty video file (0 bytes)"
    assert reasons["a/zeros.png"] == "not a readable image (Pillow does not recognise its format)"
    assert "JPEG" in reasons["a/cut.jpg"]
    assert all(PLAIN_TEXT.match(reason) and "0x" not in reason for reason in reasons.values()), reasons


def test_corpus_warnings_are_capped_with_a_count(tmp_path, capsys):
    src = tmp_path / "src"
    write_text(src / "ok.txt", 3)
    for i in range(MAX_WARNINGS + 5):
        (src / f"notes{i:02d}.xyz").write_bytes(b"x")
    corpus = discover(src)
    assert len(corpus.skipped) == MAX_WARNINGS + 5
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == MAX_WARNINGS + 1 and "5 more" in lines[-1]
    assert all("unknown extension '.xyz'" in line for line in lines[:-1])


def test_cli_choices_come_from_the_one_list():
    from corgi_io.packing import layout
    from corgi_io.cli.pack import pack_command
    from corgi_io.manifest import FORMATS, KINDS

    from corgi_io.packing.sources.forms import FORMS
    from corgi_io.packing.transforms.image import IMAGE_FORMATS

    choices = {p.name: tuple(p.type.choices) for p in pack_command.params if hasattr(p.type, "choices")}
    assert choices == {"fmt": FORMATS, "kind": ("auto", *KINDS), "order": layout.ORDERS,
                       "image_format": tuple(IMAGE_FORMATS), "from_": FORMS}
    assert all(get_format(name).SUFFIX for name in FORMATS)

"""A manifest is untrusted input: a seeded fault-injection campaign against `open_manifest`.

One small pack of each version is built once.  Every mutation damages its manifest files in
place (the head, a column, the version-1 npz), the pack is opened, every block's rows are used
as a rank uses them, `verify` runs, and the files are restored.  Opening checks only the head,
the column files and the block and shard tables, so each outcome must be one of three: the
pack opens and is self-consistent (every row validates, every key decodes, `verify` runs to an
answer); or `ManifestError` is raised with one line naming a file under the pack root, at
open, or at the first use of the damaged rows, and then by `verify` too (it validates every
row).  Mutations that leave no valid reading (a bad version, a path out of the pack, a column
of the wrong dtype...) must be refused.  While each one runs, an audit hook
records every file opened and every pickle lookup, and tracemalloc the peak memory: nothing
outside the root may be opened (a copy of a shard waits at `../SECRET.bin`), nothing may be
unpickled, and no open may allocate more than PEAK_LIMIT.  The table of kinds and outcomes is
printed for the release notes.
"""
from __future__ import annotations

import io
import json
import math
import os
import random
import shutil
import signal
import struct
import sys
import tracemalloc
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from corgi_io import CorgiError, ManifestError, open_manifest, verify
from corgi_io.manifest.checks import validate
from corgi_io.manifest.names import shard_path_problem

SEED = 20261122
PEAK_LIMIT = 50 << 20      # bytes one open may allocate; these packs need a few kilobytes
HANG_LIMIT = 5             # seconds before an open counts as hung (a FIFO opened for reading blocks)
MODULE_SUFFIXES = (".py", ".pyc", ".so")
V1_PACK = Path(__file__).parents[1] / "data" / "v1-wds"


# --- the packs under attack -------------------------------------------------------------------

@dataclass
class Target:
    """A pack at <base>/pack, its pristine manifest files, and a copy of its first shard at <base>/SECRET.bin."""

    root: Path
    files: dict = field(default_factory=dict)   # relpath -> bytes of every manifest file
    shards: set = field(default_factory=set)

    @property
    def base(self) -> Path:
        return self.root.parent

    @property
    def secret(self) -> Path:
        return self.base / "SECRET.bin"

    def snapshot(self) -> None:
        self.shards = {p.name for p in self.root.iterdir() if p.name.startswith("shard-")}
        self.secret.write_bytes((self.root / min(self.shards)).read_bytes())  # passes every check, if reached
        self.files = {str(p.relative_to(self.root)): p.read_bytes() for p in self.root.rglob("*")
                      if p.is_file() and p.name not in self.shards}

    def restore(self) -> None:
        """Undo any mutation: remove all but the shards, in the root and beside it, and rewrite the originals."""
        for place, keep in ((self.root, self.shards), (self.base, {self.root.name, self.secret.name})):
            for entry in place.iterdir():
                if entry.name not in keep:
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for relpath, data in self.files.items():
            (self.root / relpath).parent.mkdir(exist_ok=True)
            (self.root / relpath).write_bytes(data)


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict:
    """{"v2": a fresh 12-sample, 5-shard text pack, "v1": a copy of tests/data/v1-wds}."""
    from helpers.corpus_factory import write_text

    from corgi_io import PackOptions, pack

    source = tmp_path_factory.mktemp("source")
    for i in range(12):
        write_text(source / ("cat", "dog", "bird")[i % 3] / f"t{i}.txt", 20 + 7 * i, seed=i)
    v2 = Target(tmp_path_factory.mktemp("v2") / "pack")
    pack(source, v2.root, PackOptions(format="wds", block_samples=3, block_bytes=4 << 10, shard_bytes=8 << 10))
    v1 = Target(tmp_path_factory.mktemp("v1") / "pack")
    shutil.copytree(V1_PACK, v1.root)
    for target in (v1, v2):
        target.snapshot()
    return {"v1": v1, "v2": v2}


@pytest.fixture
def v2(targets):
    yield targets["v2"]
    targets["v2"].restore()


@pytest.fixture
def v1(targets):
    yield targets["v1"]
    targets["v1"].restore()


# --- what an open does: files opened, pickle lookups, peak memory -----------------------------

class Hung(BaseException):
    """An open that blocked past HANG_LIMIT (a BaseException, so that no `except OSError` swallows it)."""


class Watch:
    """Records, while active, every file opened and every global an unpickler looked up, and the peak memory.

    The audit hook (installed once: hooks cannot be removed) sees `open`, `os.open`, `io.open_code`
    and numpy's memory maps, whoever calls them; tracemalloc sees numpy's buffers.  An open that
    blocks longer than HANG_LIMIT is interrupted with Hung.
    """

    active = None
    installed = False

    def __init__(self):
        self.opened, self.unpickled, self.peak = [], [], 0

    @classmethod
    def hook(cls, event: str, args: tuple) -> None:
        watch = cls.active
        if watch is None:
            return
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            watch.opened.append(os.fsdecode(args[0]))
        elif event == "pickle.find_class":
            watch.unpickled.append(f"{args[0]}.{args[1]}")

    @staticmethod
    def hung(signum, frame):
        raise Hung(f"still blocked after {HANG_LIMIT} s")

    def __enter__(self):
        if not Watch.installed:
            sys.addaudithook(Watch.hook)
            Watch.installed = True
        self.previous_alarm = signal.signal(signal.SIGALRM, Watch.hung)
        signal.alarm(HANG_LIMIT)
        tracemalloc.start()
        self.start = tracemalloc.get_traced_memory()[0]
        Watch.active = self
        return self

    def __exit__(self, *exc):
        Watch.active = None
        self.peak = tracemalloc.get_traced_memory()[1] - self.start
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous_alarm)

    def outside(self, target: Target) -> list:
        """Opened paths that resolve outside the pack root (call before the pack is restored).

        Modules imported lazily on the way are allowed, unless they lie beside the pack.
        """
        root, base = os.path.realpath(target.root), os.path.realpath(target.base)
        found = []
        for path in self.opened:
            real = os.path.realpath(path)
            if os.path.commonpath([real, root]) == root:
                continue
            if os.path.splitext(real)[1] in MODULE_SUFFIXES and os.path.commonpath([real, base]) != base:
                continue
            found.append(path)
        return found


# --- editing the manifest files ---------------------------------------------------------------

RAW = "\x00raw:"  # a string value that `write_head` replaces by raw JSON text (what json.dumps cannot write)
DEEP = RAW + "[" * 10000 + "]" * 10000          # RecursionError in json.loads
NESTED = RAW + "[" * 900 + "]" * 900            # parses, but a careless repr() of it recurses too deep
NASTY_VALUES = [0, 1, -1, 2, "2", "", "x", True, False, None, [], {}, [1], {"a": 1}, 2.0, 1.5, math.nan, math.inf,
                -math.inf, 10 ** 400, -10 ** 400, 2 ** 63, 1e308, DEEP, NESTED, "\ud800", "a\nb", "x" * 5000]
NASTY_INTEGERS = [-1, -2 ** 63, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 62, 2 ** 62 + 1, 2 ** 63, 2 ** 64, 10 ** 400, 0, 2.0]
BAD_VERSIONS = [True, False, 2.0, "2", None, -1, 0, 1, 7, 10 ** 400, [2], {"v": 2}, 1.0, "two", 2.5, math.nan,
                NESTED]


def read_head(t: Target) -> dict:
    return json.loads((t.root / "manifest.json").read_bytes())


def write_head(t: Target, head: dict) -> None:
    text = json.dumps(head)
    for raw in (DEEP, NESTED):
        text = text.replace(json.dumps(raw), raw[len(RAW):])
    (t.root / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")


def head_nodes(value, path=()) -> list:
    """Every (container path, key) in a JSON tree, depth first."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    nodes = []
    for key, child in items:
        nodes.append((path, key))
        nodes += head_nodes(child, path + (key,))
    return nodes


def pick_node(head: dict, rng, accept=lambda path, value: True) -> tuple:
    """(container, key, "a/b/c") of a random node of the head that `accept` takes."""
    nodes = []
    for path, key in head_nodes(head):
        container = head
        for step in path:
            container = container[step]
        if accept(path, container[key]):
            nodes.append((container, key, "/".join(map(str, path + (key,)))))
    return rng.choice(nodes)


def columns(t: Target) -> list:
    return sorted((t.root / "columns").glob("*.npy"))


def npy(array, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def npy_bytes(descr, shape, data: bytes = b"", fortran: bool = False) -> bytes:
    """An .npy file (version 1.0) whose header says whatever we like; a str `shape` goes in verbatim."""
    header = "{'descr': %r, 'fortran_order': %r, 'shape': %s, }" % (
        descr, fortran, shape if isinstance(shape, str) else repr(shape))
    header += " " * (-(len(header) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin-1") + data


def data_offset(raw: bytes) -> int:
    return 10 + struct.unpack("<H", raw[8:10])[0]


def flip(raw: bytes, rng, lo: int = 0, hi: int | None = None, times: int = 1) -> bytes:
    buf = bytearray(raw)
    for _ in range(times):
        buf[rng.randrange(lo, len(buf) if hi is None else hi)] ^= rng.randrange(1, 256)
    return bytes(buf)


def save(path: Path, array, allow_pickle: bool = False) -> None:
    path.write_bytes(npy(array, allow_pickle))


def set_head(t: Target, **fields) -> None:
    write_head(t, {**read_head(t), **fields})


def update_head(t: Target, name: str, **values) -> None:
    """Change some items of the head's object `name` (counts, columns)."""
    head = read_head(t)
    head[name].update(values)
    write_head(t, head)


# --- mutations of the head: each returns (what it did, whether the result must be refused) ----

def outside_options(path, value) -> bool:
    """Nodes inside `options` are opaque to readers (only `corgi pack` compares them): mutate elsewhere."""
    return path[:1] != ("options",)


def head_delete(t, rng, i):
    head = read_head(t)
    container, key, where = pick_node(head, rng, outside_options)
    del container[key]
    write_head(t, head)
    return f"delete {where}", False


def head_retype(t, rng, i):
    head = read_head(t)
    container, key, where = pick_node(head, rng, outside_options)
    container[key] = value = NASTY_VALUES[i % len(NASTY_VALUES)]
    write_head(t, head)
    return f"{where} = {str(value)[:20]!r}", False


HEAD_FIELDS = ("format", "options", "labels", "shards", "skipped", "checksum", "extensions", "counts")
ONE_OF_EACH_TYPE = ([], {}, None, 10 ** 400, "x", True, 1.5, NESTED)


def head_field_types(t, rng, i):
    """Every required field of the head, in turn, as a value of every JSON type."""
    name, value = HEAD_FIELDS[i // len(ONE_OF_EACH_TYPE)], ONE_OF_EACH_TYPE[i % len(ONE_OF_EACH_TYPE)]
    set_head(t, **{name: value})
    return f"{name} = {str(value)[:20]!r}", (name, value) != ("options", {})


def head_number(t, rng, i):
    """An integer field outside its range, or off by one; only `options` (opaque to readers) is spared."""
    head = read_head(t)
    container, key, where = pick_node(head, rng, lambda path, v: type(v) is int and outside_options(path, v))
    choices = NASTY_INTEGERS + [container[key] + 1, container[key] - 1]
    container[key] = value = choices[i % len(choices)]
    write_head(t, head)
    return f"{where} = {str(value)[:20]}", type(value) is not int or not 0 <= value <= 2 ** 62


def head_version(t, rng, i):
    set_head(t, corgi_manifest_version=(value := BAD_VERSIONS[i % len(BAD_VERSIONS)]))
    return f"version = {value!r}", True


def shard_paths(t: Target) -> list:
    """(path, must be refused): escapes, non-normal forms, non-strings; and odd names that stay inside."""
    escapes = ["../SECRET.bin", "../../SECRET.bin", "/SECRET.bin", str(t.secret), "a/../../SECRET.bin",
               "shard-000000.tar/../../SECRET.bin", "http://127.0.0.1:9/SECRET.bin", f"file://{t.secret}",
               "s3://bucket/SECRET.bin", "C:\\SECRET.bin", "./shard-000000.tar", "x//y.tar", "x/", "", ".", "..",
               "x\x00.tar", "x\n.tar", "\ud800.tar", "shard-000000.tar", 7, None, ["../SECRET.bin"]]
    inside = ["~/SECRET.bin", "\\\\server\\share\\x", "columns/sample_size.npy", "columns", "SECRET.bin"]
    return [(path, True) for path in escapes] + [(path, False) for path in inside]


def head_path(t, rng, i):
    head = read_head(t)
    shard = rng.randrange(1, len(head["shards"]))  # shard 0's path is the duplicate tried above
    path, refuse = shard_paths(t)[i % len(shard_paths(t))]
    head["shards"][shard]["path"] = path
    write_head(t, head)
    return f"shards/{shard}/path = {path!r}", refuse


def head_bytes(t, rng, i):
    path = t.root / "manifest.json"
    raw = path.read_bytes()
    op = ("flip", "flip 3", "truncate", "append", "empty", "binary", "lone surrogate", "sparse 1 GiB", "fifo",
          "directory")[i % 10]
    if op.startswith("flip"):
        path.write_bytes(flip(raw, rng, times=1 if op == "flip" else 3))
    elif op == "truncate":
        path.write_bytes(raw[:rng.randrange(len(raw))])
    elif op == "append":
        path.write_bytes(raw + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
    elif op in ("empty", "binary"):
        path.write_bytes(b"" if op == "empty" else b"\xff\xfe\x00\x93NUMPY" + raw[:50])
    elif op == "lone surrogate":  # UTF-8-encoded U+D800 in a label (json.loads decodes bytes with surrogatepass)
        path.write_bytes(raw.replace(b'"cat"', b'"c\xed\xa0\x80t"', 1))
    elif op == "sparse 1 GiB":
        os.truncate(path, (1 << 30) + 1)
    else:
        path.unlink()
        os.mkfifo(path) if op == "fifo" else path.mkdir()
    return op, op not in ("flip", "flip 3", "append")


# --- mutations of the version-2 columns -------------------------------------------------------

def column_delete(t, rng, i):
    op = ("unlink", "unlink", "unlink", "remove columns/", "directory", "columns/ is a file")[i % 6]
    column = rng.choice(columns(t))
    if op == "unlink":
        column.unlink()
    elif op == "directory":
        column.unlink()
        column.mkdir()
    else:
        shutil.rmtree(t.root / "columns")
        if op == "columns/ is a file":
            (t.root / "columns").write_bytes(b"columns")
    return f"{op} {column.name}", True


def column_truncate(t, rng, i):
    column = rng.choice(columns(t))
    raw = column.read_bytes()
    cut = (0, rng.randrange(1, data_offset(raw)), rng.randrange(data_offset(raw), len(raw)))[i % 3]
    column.write_bytes(raw[:cut])
    return f"{column.name}[:{cut}]", True


def column_flip_header(t, rng, i):
    column = rng.choice(columns(t))
    raw = column.read_bytes()
    column.write_bytes(flip(raw, rng, 0, data_offset(raw), times=1 + i % 3))
    return column.name, False  # a flipped pad byte (a space) may still parse


def column_flip_data(t, rng, i):
    column = rng.choice(columns(t))
    raw = column.read_bytes()
    column.write_bytes(flip(raw, rng, data_offset(raw), times=1 + i % 2))
    return column.name, False  # a checksum, a size or a key byte may take any value; `verify` judges those


DTYPES = ["<i4", "<i8", "<u8", "<f8", "<f4", "|b1", ">i8", ">i4", "<c16", "|S8", "<U2", "<M8[s]", [("a", "<i8")],
          "O", [("a", "<u4"), ("b", "<u4")]]


def column_dtype(t, rng, i):
    column = rng.choice(columns(t))
    array = np.load(column, allow_pickle=False)
    dtype = DTYPES[i % len(DTYPES)]
    if dtype == "O":
        save(column, array.astype(object), allow_pickle=True)
    else:
        save(column, array.astype(dtype) if isinstance(dtype, str) else np.zeros(len(array), dtype=dtype))
    return f"{column.name} as {dtype}", np.dtype(dtype) != array.dtype


def column_shape(t, rng, i):
    column = rng.choice(columns(t))
    array = np.load(column, allow_pickle=False)
    descr, data, rows = array.dtype.str, array.tobytes(), len(array)
    nested = "(" * 200 + f"{rows}," + ")" * 200
    huge_counts = dict.fromkeys(("samples", "blocks", "key_bytes"), 2 ** 40)
    ops = {"2-D": lambda: save(column, array.reshape(-1, 1)),
           "fortran 2-D": lambda: save(column, np.asfortranarray(np.stack([array, array], 1))),
           "0-d": lambda: save(column, np.array(array[0])),
           "claims 10**12 rows": lambda: column.write_bytes(npy_bytes(descr, (10 ** 12,), data)),
           "claims 2**40 rows, counts agree": lambda: (column.write_bytes(npy_bytes(descr, (2 ** 40,), data)),
                                                        update_head(t, "counts", **huge_counts)),
           "claims -1 rows": lambda: column.write_bytes(npy_bytes(descr, (-1,), data)),
           "claims (10**6, 10**6)": lambda: column.write_bytes(npy_bytes(descr, (10 ** 6, 10 ** 6), data)),
           "claims (n, 0)": lambda: column.write_bytes(npy_bytes(descr, (rows, 0))),
           "claims ()": lambda: column.write_bytes(npy_bytes(descr, (), data[:array.itemsize])),
           "fortran flag": lambda: column.write_bytes(npy_bytes(descr, (rows,), data, fortran=True)),
           "huge subarray dtype": lambda: column.write_bytes(npy_bytes([("a", "<i8", (2 ** 40,))], (1,), data)),
           "200-deep shape": lambda: column.write_bytes(npy_bytes(descr, nested, data)),
           "header length lies": lambda: column.write_bytes(npy_bytes(descr, nested, data)[:8] + b"\x40\x00" +
                                                             npy_bytes(descr, nested, data)[10:]),
           "sparse 8 GiB": lambda: os.truncate(column, 1 << 33)}
    op = list(ops)[i % len(ops)]
    ops[op]()
    return f"{column.name}: {op}", True


def column_rows(t, rng, i):
    column = rng.choice(columns(t))
    array = np.load(column, allow_pickle=False)
    extra = 1 + i % 3
    if i % 2:
        save(column, np.concatenate([array, array[-1:].repeat(extra)]))
        return f"{column.name} + {extra} rows", True
    save(column, array[:-extra])
    return f"{column.name} - {extra} rows", True


def column_values(t, rng, i):
    column = rng.choice(columns(t))
    array = np.load(column, allow_pickle=False).copy()
    info, row = np.iinfo(array.dtype), rng.randrange(len(array))
    value = [info.min, info.max, -1, 0, 2 ** 62 + 1, int(array[row]) + 1, int(array[row]) - 1][i % 7]
    array[row] = min(max(value, info.min), info.max)
    save(column, array)
    return f"{column.name}[{row}] = {array[row]}", False


def column_special(t, rng, i):
    column = rng.choice(columns(t))
    op = ("symlink out (relative)", "symlink out (absolute)", "columns/ links out", "fifo", "empty file",
          "extra pickled column", "extra column", "symlink inside")[i % 8]
    if op.startswith("symlink out"):
        column.unlink()
        column.symlink_to(t.secret if "absolute" in op else Path("..") / ".." / t.secret.name)
    elif op == "columns/ links out":  # a complete, valid copy of the columns outside the root
        shutil.move(t.root / "columns", t.base / "outside-columns")
        (t.root / "columns").symlink_to(t.base / "outside-columns")
    elif op in ("fifo", "empty file"):
        column.unlink()
        os.mkfifo(column) if op == "fifo" else column.write_bytes(b"")
    elif op.startswith("extra"):  # ignored: readers open only the columns of the schema
        save(t.root / "columns" / "sample_evil.npy", np.array([print], dtype=object), allow_pickle=True)
        save(t.root / "columns" / "sample_extra.npy", np.arange(12))
    else:
        shutil.move(column, t.root / "moved.npy")
        column.symlink_to(Path("..") / "moved.npy")
    return f"{column.name}: {op}", not op.startswith(("extra", "symlink inside"))


# --- mutations of a version-1 npz -------------------------------------------------------------

def npz_members(t: Target) -> dict:
    with zipfile.ZipFile(t.root / "manifest.npz") as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def write_npz(t: Target, members: dict, deflated=()) -> None:
    """Rewrite manifest.npz from `members`; the head's columns.bytes follows the new size."""
    path = t.root / "manifest.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data, zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED)
    update_head(t, "columns", bytes=path.stat().st_size)


def patch_zip(t: Target, signature: bytes, at: int, change) -> None:
    """Replace the 4-byte field `at` bytes into the first zip record starting with `signature` by change(old)."""
    path = t.root / "manifest.npz"
    raw = path.read_bytes()
    where = raw.index(signature) + at
    value = change(struct.unpack("<I", raw[where:where + 4])[0])
    path.write_bytes(raw[:where] + struct.pack("<I", value) + raw[where + 4:])


def npz_truncate(t, rng, i):
    path = t.root / "manifest.npz"
    raw = path.read_bytes()
    cut = rng.randrange(len(raw))
    path.write_bytes(raw[:cut])
    if i % 2:
        update_head(t, "columns", bytes=cut)
    return f"npz[:{cut}]" + (", head agrees" if i % 2 else ""), True


def npz_flip(t, rng, i):
    path = t.root / "manifest.npz"
    path.write_bytes(flip(path.read_bytes(), rng, times=1 + i % 4))
    return f"{1 + i % 4} bytes", False


def npz_member(t, rng, i):
    members = npz_members(t)
    name = rng.choice(sorted(members))
    array = np.load(io.BytesIO(members[name]), allow_pickle=False)
    path = t.root / "manifest.npz"
    huge = lambda old: 2 ** 32 - 2  # noqa: E731
    ops = {"compressed member": lambda: write_npz(t, members, deflated={name}),
           "object member": lambda: write_npz(t, {**members, name: npy(array.astype(object), allow_pickle=True)}),
           "missing member": lambda: write_npz(t, {k: v for k, v in members.items() if k != name}),
           "wrong dtype": lambda: write_npz(t, {**members, name: npy(array.astype("<f8"))}),
           "2-D member": lambda: write_npz(t, {**members, name: npy(array.reshape(-1, 1))}),
           "empty key_offsets": lambda: write_npz(t, {**members, "key_offsets.npy": npy(np.zeros(0, "<i8"))}),
           "empty sample_crc32": lambda: write_npz(t, {**members, "sample_crc32.npy": npy(np.zeros(0, "<u4"))}),
           "claims 10**12 rows": lambda: write_npz(t, {**members, name: npy_bytes(array.dtype.str, (10 ** 12,),
                                                                                 array.tobytes())}),
           "central directory size 4 GiB": lambda: patch_zip(t, b"PK\x01\x02", 24, huge),
           "encrypted flag": lambda: patch_zip(t, b"PK\x01\x02", 8, lambda old: old | 1),
           "head bytes disagree": lambda: path.write_bytes(path.read_bytes() + b"\0"),
           "sparse 8 GiB npz": lambda: os.truncate(path, 1 << 33),
           "not a zip": lambda: path.write_bytes(b"\x93NUMPY" + bytes(200)),
           "extra pickled member": lambda: write_npz(t, {**members, "evil.npy": npy(np.array([print]), True)}),
           "local header size 4 GiB": lambda: patch_zip(t, b"PK\x03\x04", 22, huge),
           "same member, other name": lambda: write_npz(t, {**members, name.upper(): members[name]})}
    op = list(ops)[i % len(ops)]
    ops[op]()
    return f"{op} ({name})", op not in ("extra pickled member", "local header size 4 GiB", "same member, other name")


# --- the campaign -----------------------------------------------------------------------------

CAMPAIGN = [  # (kind, mutation, count, pack version)
    ("head: delete a field", head_delete, 20, "v2"),
    ("head: retype a field", head_retype, 30, "v2"),
    ("head: each field as each type", head_field_types, len(HEAD_FIELDS) * len(ONE_OF_EACH_TYPE), "v2"),
    ("head: out-of-range number", head_number, 20, "v2"),
    ("head: bad version", head_version, 17, "v2"),
    ("head: shard path escape", head_path, 28, "v2"),
    ("head: damaged bytes", head_bytes, 20, "v2"),
    ("column: delete", column_delete, 12, "v2"),
    ("column: truncate", column_truncate, 15, "v2"),
    ("column: flip header bytes", column_flip_header, 15, "v2"),
    ("column: flip data bytes", column_flip_data, 20, "v2"),
    ("column: dtype swap", column_dtype, 15, "v2"),
    ("column: shape change", column_shape, 14, "v2"),
    ("column: rows added/dropped", column_rows, 12, "v2"),
    ("column: extreme value", column_values, 14, "v2"),
    ("column: link, FIFO, extra file", column_special, 8, "v2"),
    ("v1 head: delete a field", head_delete, 8, "v1"),
    ("v1 head: retype a field", head_retype, 8, "v1"),
    ("v1 npz: truncate", npz_truncate, 12, "v1"),
    ("v1 npz: flip bytes", npz_flip, 16, "v1"),
    ("v1 npz: member swap", npz_member, 16, "v1"),
]
OPENED, REFUSED, REFUSED_AT_USE, ESCAPED = ("opened, consistent", "ManifestError at open",
                                           "ManifestError at first use", "anything else")


def use_every_block(m) -> None:
    """Use each block's rows as a rank's loader does: validate them first, then read its columns and keys."""
    s = m.samples
    for first, count in zip(m.blocks.first.tolist(), m.blocks.count.tolist()):
        stop = first + count
        m.validate_rows(first, stop)
        assert 0 <= int(s.offset[first]) <= int(s.offset[stop - 1] + s.length[stop - 1]) <= m.shards[s.shard[first]].bytes
        for column in s.arrays.values():
            column[first:stop].tolist()
        assert len(m.keys(first, stop)) == count


def check_consistent(m) -> None:
    """What a manifest whose every block was used must satisfy: it validates afresh, keys decode, shard paths are safe."""
    validate(m, m.columns_url)
    keys = m.keys()
    assert len(keys) == m.num_samples and [m.key(i) for i in range(m.num_samples)] == keys
    assert all(shard_path_problem(shard.path) is None for shard in m.shards)


def names_the_pack(exc: ManifestError, t: Target) -> bool:
    return "\n" not in str(exc) and f"{t.root}/" in str(exc)


def _row_groups_disagree(exc: ManifestError, t: Target) -> bool:
    """Verify found the row groups (what remote readers read) unlike the local .npy columns a mutation changed."""
    return names_the_pack(exc, t) and f"{t.root}/columns/rows.bin: block " in str(exc)


def attempt(t: Target) -> tuple:
    """(outcome, detail, Watch) of opening the pack, using every block's rows, and verifying it.

    A fault in per-sample rows may pass the open: then using the rows must raise it, and `verify`
    (which validates every row) must raise it too; when using the rows raises nothing, neither may verify, but
    for rows.bin unlike a mutated .npy column (remote readers would read other rows).
    """
    with Watch() as watch:
        try:
            m = open_manifest(str(t.root))
        except ManifestError as exc:
            return (REFUSED if names_the_pack(exc, t) else ESCAPED), str(exc), watch
        except (Exception, Hung) as exc:  # noqa: BLE001 - the point of the campaign: record whatever escapes
            return ESCAPED, f"open: {type(exc).__name__}: {str(exc)[:200]}", watch
        at_use = at_verify = None
        try:
            use_every_block(m)
            check_consistent(m)
        except ManifestError as exc:
            at_use = exc
        except (Exception, Hung) as exc:  # noqa: BLE001
            return ESCAPED, f"first use: {type(exc).__name__}: {str(exc)[:200]}", watch
        try:
            verify(str(t.root), progress=False)
        except ManifestError as exc:
            at_verify = exc
        except CorgiError:  # verify's own findings (a shard that does not match) are answers too
            pass
        except (Exception, Hung) as exc:  # noqa: BLE001
            return ESCAPED, f"verify: {type(exc).__name__}: {str(exc)[:200]}", watch
    if at_use is None and at_verify is not None and _row_groups_disagree(at_verify, t):
        return REFUSED_AT_USE, f"verify: {at_verify}", watch  # a mutated .npy column; rows.bin says otherwise
    if (at_use is None) != (at_verify is None):
        return ESCAPED, f"first use raised {at_use!s}, but verify raised {at_verify!s}", watch
    if at_use is not None:
        return (REFUSED_AT_USE if names_the_pack(at_use, t) and names_the_pack(at_verify, t) else ESCAPED), \
            f"{at_use} / {at_verify}", watch
    return OPENED, "", watch


def judge(t: Target, mutate, rng, i) -> tuple:
    """(outcome, what went wrong or None, peak bytes) of one mutation, applied, opened, checked and undone."""
    try:
        what, must_refuse = mutate(t, rng, i)
        outcome, detail, watch = attempt(t)
        trouble = [f"{outcome}: {detail}"] if outcome == ESCAPED else []
        trouble += ["opened, but must be refused"] if must_refuse and outcome == OPENED else []
        outside = sorted(set(watch.outside(t)))
        trouble += [f"opened {len(outside)} files outside the root: {outside[:3]}"] if outside else []
        trouble += [f"unpickled {watch.unpickled}"] if watch.unpickled else []
        trouble += [f"allocated {watch.peak >> 20} MiB"] if watch.peak > PEAK_LIMIT else []
    finally:
        t.restore()
    return outcome, f"{what}: {'; '.join(trouble)}" if trouble else None, watch.peak


def run_campaign(targets: dict) -> tuple:
    """({kind: Counter of outcomes}, [what went wrong], largest peak) over every mutation of CAMPAIGN, in order."""
    table, failures, largest = {}, [], 0
    for number, (kind, mutate, count, version) in enumerate(CAMPAIGN):
        table[kind] = Counter()
        for i in range(count):
            outcome, failure, peak = judge(targets[version], mutate, random.Random(f"{SEED}/{number}/{i}"), i)
            table[kind][outcome] += 1
            failures += [f"{kind} #{i} ({failure})"] if failure else []
            largest = max(largest, peak)
    return table, failures, largest


def format_table(table: dict) -> str:
    width = max(map(len, table))
    outcomes = (OPENED, REFUSED, REFUSED_AT_USE, ESCAPED)
    lines = [f"{'mutation kind':<{width}}  count  " + "  ".join(outcomes)]
    for kind, counts in list(table.items()) + [("total", sum(table.values(), Counter()))]:
        cells = "  ".join(f"{counts[o]:>{len(o)}}" for o in outcomes)
        lines.append(f"{kind:<{width}}  {sum(counts.values()):>5}  {cells}")
    return "\n".join(lines)


def test_seeded_mutation_campaign(targets, capsys):
    """300+ seeded mutations: each opens consistently or is one ManifestError line naming a file in the pack;
    nothing else escapes, nothing outside the root is opened, nothing is unpickled, no open allocates much."""
    for t in targets.values():
        assert attempt(t)[0] == OPENED  # the pristine packs open, so every refusal is the mutation's doing
    table, failures, largest = run_campaign(targets)
    with capsys.disabled():
        print(f"\nmanifest mutation campaign (seed {SEED}):\n{format_table(table)}\n"
              f"largest allocation peak of one open (tracemalloc): {largest / 1024:.0f} KiB")
    total = sum(table.values(), Counter())
    assert sum(total.values()) >= 200
    assert not failures, "\n".join(failures)


def test_instruments_see_what_they_guard(targets):
    """The campaign's meters can fail: they see an outside open, an unpickle, a large numpy array and a hang."""
    t = targets["v2"]
    with Watch() as watch:
        t.secret.read_bytes()
        np.load(io.BytesIO(npy(np.array([1], dtype=object), allow_pickle=True)), allow_pickle=True)
        np.zeros(PEAK_LIMIT + 1, dtype=np.uint8)
    assert watch.outside(t) == [str(t.secret)]
    assert watch.unpickled and watch.peak > PEAK_LIMIT
    with pytest.raises(Hung), Watch():
        signal.alarm(1)
        signal.pause()


# --- the issue's own examples, one by one -----------------------------------------------------

def refusal(t: Target, file_name: str, when: str = "open") -> tuple:
    """(message, Watch) of a ManifestError that names `file_name` under the root in one line, raised by
    `open_manifest` (`when="open"`) or, for a fault in per-sample rows, by validating every row after an
    open that succeeds (`when="rows"`)."""
    check = (lambda: open_manifest(t.root)) if when == "open" else open_manifest(t.root).validate_rows
    with Watch() as watch, pytest.raises(ManifestError) as info:
        check()
    message = str(info.value)
    assert "\n" not in message and f"{t.root}/{file_name}" in message, message
    assert not watch.outside(t) and not watch.unpickled, (watch.outside(t), watch.unpickled)
    return message, watch


@pytest.mark.parametrize("version", [True, 2.0, "2", None, -1])
def test_version_must_be_the_supported_integer(v2, version):
    set_head(v2, corgi_manifest_version=version)
    assert "version" in refusal(v2, "manifest.json")[0]


def test_negative_sample_size_refused(v2):
    path = v2.root / "columns" / "sample_size.npy"
    sizes = np.load(path).copy()
    sizes[3] = -5
    save(path, sizes)
    assert "sample size outside" in refusal(v2, "columns", when="rows")[0]


def test_empty_checksum_column_refused_at_open(v2, v1):
    save(v2.root / "columns" / "sample_checksum.npy", np.zeros(0, "<u4"))
    assert "0 rows" in refusal(v2, "columns/sample_checksum.npy")[0]
    write_npz(v1, {**npz_members(v1), "sample_crc32.npy": npy(np.zeros(0, "<u4"))})
    assert "checksum has 0 rows" in refusal(v1, "manifest.npz")[0]


def test_shard_path_escape_never_opens_the_file(v2):
    head = read_head(v2)
    head["shards"][0]["path"] = "../SECRET.bin"  # SECRET.bin is a byte-exact copy of shard 0
    write_head(v2, head)
    assert "inside the pack" in refusal(v2, "manifest.json")[0]


@pytest.mark.parametrize("op", [0, 1, 2])  # a column links to SECRET.bin (relative, absolute); columns/ links out
def test_manifest_files_linking_outside_are_refused_unopened(v2, op):
    column_special(v2, random.Random(1), op)
    assert "outside the pack root" in refusal(v2, "columns")[0]


def test_fifo_in_place_of_a_manifest_file_does_not_hang(v2):
    column_special(v2, random.Random(1), 3)
    assert "not a regular file" in refusal(v2, "columns")[0]
    (v2.root / "manifest.json").unlink()
    os.mkfifo(v2.root / "manifest.json")
    assert "not a regular file" in refusal(v2, "manifest.json")[0]


def test_object_columns_are_never_unpickled(v2, v1, tmp_path):
    marker = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(marker),)
    save(v2.root / "columns" / "sample_label.npy", np.array([Payload()] * 12, dtype=object), allow_pickle=True)
    assert "object" in refusal(v2, "columns/sample_label.npy")[0]
    write_npz(v1, {**npz_members(v1), "sample_label.npy": npy(np.array([Payload()] * 9), allow_pickle=True)})
    assert "object" in refusal(v1, "manifest.npz")[0]
    assert not marker.exists()


def test_huge_declared_sizes_fail_before_allocating(v2, v1):
    update_head(v2, "counts", blocks=2 ** 41)
    assert "counts.blocks" in refusal(v2, "manifest.json")[0]  # beyond MAX_ROWS
    path = v2.root / "columns" / "block_shard.npy"  # the first block column read
    path.write_bytes(npy_bytes("<i4", (10 ** 12,), b"\0" * 4))  # a 10**12-row claim in a 132-byte file
    update_head(v2, "counts", blocks=10 ** 12)  # which the head agrees with
    message, watch = refusal(v2, "columns/block_shard.npy")
    assert "needs" in message and watch.peak < 1 << 20
    os.truncate(v1.root / "manifest.npz", 1 << 34)  # a sparse 16 GiB npz that the head does not declare
    assert refusal(v1, "manifest.npz")[1].peak < 1 << 20


@pytest.mark.parametrize("mutation", ["version true", "negative size", "empty checksum", "path escape", "deep"])
def test_cli_reports_untrusted_manifests_in_one_line(v2, corgi, mutation):
    head = read_head(v2)
    if mutation == "negative size":
        save(v2.root / "columns" / "sample_size.npy", -np.load(v2.root / "columns" / "sample_size.npy"))
    elif mutation == "empty checksum":
        save(v2.root / "columns" / "sample_checksum.npy", np.zeros(0, "<u4"))
    else:
        escaped = [{**head["shards"][0], "path": "../SECRET.bin"}] + head["shards"][1:]
        head.update({"version true": {"corgi_manifest_version": True}, "deep": {"counts": NESTED},
                     "path escape": {"shards": escaped}}[mutation])
        write_head(v2, head)
    for command in ("stats", "verify"):
        result = corgi(command, v2.root)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and f"{v2.root}/" in lines[0], result.stderr


@pytest.mark.slow
def test_remote_column_larger_than_declared_is_not_downloaded(http_root):
    """Over HTTP a version-2 pack's column is read whole, so its size is asked first: 64 MiB where 12 rows are
    declared is refused."""
    directory, base_url = http_root
    served = Path(directory) / "mutations-v2-pack"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "v2-wds", served)
    url = base_url + "mutations-v2-pack"
    rows = open_manifest(url).num_samples
    (served / "columns" / "sample_size.npy").write_bytes(npy(np.zeros(8 << 20, "<i8")))
    with Watch() as watch, pytest.raises(ManifestError) as info:
        open_manifest(url)
    assert f"{url}/columns/sample_size.npy: {(64 << 20) + 128} bytes, more than" in str(info.value), rows
    assert watch.peak < 16 << 20


@pytest.mark.slow
def test_remote_row_groups_larger_than_declared_are_not_downloaded(targets, http_root):
    """A version-5 pack over HTTP reads only the declared bytes of blocks.bin and rows.bin: 64 MiB appended to
    each costs no memory, and the rows read are the declared ones."""
    directory, base_url = http_root
    served = Path(directory) / "mutations-pack"
    shutil.copytree(targets["v2"].root, served)
    url = base_url + "mutations-pack"
    before = open_manifest(url)
    before.validate_rows()
    for name in ("rows.bin", "blocks.bin"):
        with open(served / "columns" / name, "ab") as f:
            f.write(bytes(64 << 20))
    with Watch() as watch:
        after = open_manifest(url)
        after.validate_rows()
    assert watch.peak < 16 << 20
    assert after.keys() == before.keys() and np.array_equal(np.asarray(after.samples.size), before.samples.size)

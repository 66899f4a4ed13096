"""Skip records beside the head (issue 28, defect 10): opening a pack costs the same whatever their number.

500k `--dedup` skips made a 72 MB manifest.json that every process opening the pack parsed and kept (364 MB
RSS against 32 MB).  Version 4 keeps them in ``columns/skipped.jsonl``, read a line at a time when asked, and a
summary in the head; older heads, which list them, still open.
"""
from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import pytest

from corgi_io.errors import ManifestError
from corgi_io.manifest import DUPLICATE_REASON, HEAD_NAME, open_manifest, save_head
from corgi_io.manifest.schema import MAX_SKIP_REASONS, SKIPS_PATH
from corgi_io.manifest.skips import MAX_RECORD_BYTES, MAX_TEXT, READ_BYTES
from corgi_io.report.stats import summarize
from corgi_io.report.verify import verify
from helpers.packs import synthetic_pack

MANY = 200_000


def records(n: int, reason: str = DUPLICATE_REASON) -> list:
    return [{"path": f"a/{i:07d}.txt", "reason": reason} for i in range(n)]


def with_skips(root, skipped) -> None:
    """Rewrite the head of the pack at `root` (columns kept) with the skip records `skipped`, through the writer."""
    head = json.loads((root / HEAD_NAME).read_bytes())
    counts = head.pop("counts")
    save_head(root, {**head, "skipped": skipped}, counts)


def edit_head(root, **fields) -> None:
    head = json.loads((root / HEAD_NAME).read_bytes())
    (root / HEAD_NAME).write_text(json.dumps({**head, **fields}))


def made(root):
    root.mkdir()
    synthetic_pack(root, 1000)
    return root


@pytest.fixture
def pack(tmp_path):
    return made(tmp_path / "pack")


def opening_cost(root) -> tuple:
    """(peak, retained) bytes that Python allocates to open the pack at `root`."""
    tracemalloc.start()
    try:
        manifest = open_manifest(root)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert manifest.num_samples == 1000
    return peak, retained


def test_opening_costs_the_same_whatever_the_number_of_skip_records(pack, tmp_path):
    made(tmp_path / "none")
    with_skips(pack, records(MANY))
    assert (pack / HEAD_NAME).stat().st_size < 4096  # a summary, not 200k records
    assert (pack / SKIPS_PATH).stat().st_size > MANY * 60
    baseline, skipped = opening_cost(tmp_path / "none"), opening_cost(pack)
    assert skipped[0] < baseline[0] + (64 << 10) and skipped[1] < baseline[1] + (16 << 10), (baseline, skipped)


def test_the_records_read_back_in_order_and_the_head_counts_them(pack):
    written = records(3, "unknown extension '.xyz'") + records(5)
    with_skips(pack, iter(written))  # any iterable
    m = open_manifest(pack)
    assert m.skips == {"count": 8, "bytes": (pack / SKIPS_PATH).stat().st_size,
                       "reasons": {DUPLICATE_REASON: 5, "unknown extension '.xyz'": 3}}
    assert list(m.skip_records()) == written and list(m.skip_records()) == written
    summary = summarize(m)
    assert (summary["skipped"], summary["duplicates"]) == (8, 5)
    (pack / SKIPS_PATH).unlink()  # stats reads the head's summary only
    assert summarize(open_manifest(pack))["skipped"] == 8


@pytest.mark.parametrize("where", ["local", "http"])
def test_records_across_read_chunks_read_back_from_local_and_remote_packs(pack, where, request):
    written = records(30_000) + [{"path": "é" * 5000, "reason": "r"}] + records(3, "\u2028 line separator")
    with_skips(pack, written)
    assert (pack / SKIPS_PATH).stat().st_size > 2 * READ_BYTES  # lines cross chunk boundaries
    root = pack
    if where == "http":
        directory, base_url = request.getfixturevalue("http_root")
        shutil.copytree(pack, Path(directory) / "skips-pack")
        root = base_url.rstrip("/") + "/skips-pack"
    assert list(open_manifest(root).skip_records()) == written


def test_the_head_names_the_most_frequent_reasons_and_always_the_duplicates(pack):
    written = [record for r in range(100) for record in records(2 + r, f"reason {r}")] + records(1)
    with_skips(pack, written)
    reasons = open_manifest(pack).skips["reasons"]
    assert len(reasons) == MAX_SKIP_REASONS and reasons[DUPLICATE_REASON] == 1
    assert list(reasons)[:3] == ["reason 99", "reason 98", "reason 97"] and "reason 0" not in reasons
    assert open_manifest(pack).skips["count"] == len(written)


def test_a_huge_reason_is_clipped_and_reads_back(pack):
    with_skips(pack, [{"path": "p\n\x00é", "reason": "x" * (4 * MAX_TEXT)}])
    (record,) = open_manifest(pack).skip_records()
    assert record["path"] == "p\n\x00é" and len(record["reason"]) == MAX_TEXT and record["reason"].endswith("...")


def test_an_old_head_that_lists_its_records_still_opens(pack):
    written = records(4) + [{"path": "b", "reason": "not UTF-8 text (byte 3)", "extra": 1}]
    (pack / SKIPS_PATH).unlink()
    edit_head(pack, corgi_manifest_version=3, skipped=written)
    m = open_manifest(pack)
    assert m.version == 3 and m.skips == {"count": 5, "reasons": {DUPLICATE_REASON: 4, "not UTF-8 text (byte 3)": 1}}
    assert list(m.skip_records()) == written  # as listed


@pytest.mark.parametrize("bad, message", [
    ({}, "skipped must be a list"), ([1], "skipped must be a list of dict"),
    ([{"path": "a"}], r"skipped\[0\]: a skip record must be"), ([{"path": 1, "reason": "r"}], r"skipped\[0\]: a skip"),
    ([{"path": "a", "reason": "r"}, {"path": "\ud800", "reason": "r"}], r"skipped\[1\]: a skip record must be"),
])
def test_an_old_head_with_a_malformed_record_is_refused(pack, bad, message):
    edit_head(pack, corgi_manifest_version=3, skipped=bad)
    with pytest.raises(ManifestError, match="manifest.json: " + message):
        open_manifest(pack)


@pytest.mark.parametrize("summary, message", [
    ([], "skipped must be an object"), ({"count": 1, "bytes": 10}, "reasons must be an object"),
    ({"count": -1, "bytes": 0, "reasons": {}}, "skipped.count"),
    ({"count": 1, "bytes": 0, "reasons": {}}, "skipped counts"),
    ({"count": 1, "bytes": 10, "reasons": {"r": 2}}, r"skipped.reasons\['r'\]"),
    ({"count": 200, "bytes": 10, "reasons": {f"r{i}": 1 for i in range(65)}}, "at most 64 reasons"),
    ({"count": 2 ** 41, "bytes": 10, "reasons": {}}, "skipped.count"),
    ({"count": 1, "bytes": 10, "reasons": {"r": True}}, r"skipped.reasons\['r'\]"),
])
def test_a_malformed_summary_is_refused_at_open(pack, summary, message):
    edit_head(pack, skipped=summary)
    with pytest.raises(ManifestError, match=message):
        open_manifest(pack)


def damaged(pack, mutate) -> str:
    """The one-line ManifestError of reading the skip records after `mutate(path of the skip file)`."""
    with_skips(pack, records(3))
    mutate(pack / SKIPS_PATH)
    m = open_manifest(pack)  # opening reads nothing of the file
    with pytest.raises(ManifestError) as caught:
        list(m.skip_records())
    message = str(caught.value)
    assert "\n" not in message and str(pack / SKIPS_PATH) in message
    return message


LINE = len(json.dumps(records(1)[0], ensure_ascii=False)) + 1


@pytest.mark.parametrize("mutate, message", [
    (lambda path: path.unlink(), "cannot read"),
    (lambda path: path.write_bytes(path.read_bytes() + b"{}\n"), "bytes, more than"),
    (lambda path: path.write_bytes(path.read_bytes()[:-1]), "bytes, head says"),
    (lambda path: path.write_bytes(path.read_bytes()[:-1] + b"x"),
     f"byte offset {2 * LINE}: the last line has no newline"),
    (lambda path: path.write_bytes(path.read_bytes()[:LINE] + b"[" * (LINE - 1) + b"\n" + path.read_bytes()[2 * LINE:]),
     f"byte offset {LINE}: line 2: not a JSON record"),
    (lambda path: path.write_bytes(b'{"path": 7' + b" " * (LINE - 12) + b"}\n" + path.read_bytes()[LINE:]),
     "byte offset 0: line 1: a skip record must be"),
    (lambda path: path.write_bytes(path.read_bytes().replace(b"(--dedup)", b"(--dedop)", 1)),
     "holds 2 records of reason \"its primary"),
    (lambda path: path.write_bytes(path.read_bytes()[:-LINE] + b"\n" * LINE),
     f"byte offset {2 * LINE}: line 3: not a JSON"),
])
def test_a_damaged_skip_file_is_one_line_naming_it(pack, mutate, message):
    assert message in damaged(pack, mutate)


def test_a_skip_file_outside_the_pack_is_refused(pack, tmp_path):
    def outside(path):
        (tmp_path / "secret").write_bytes(path.read_bytes())
        path.unlink()
        os.symlink(tmp_path / "secret", path)
    assert "outside the pack root" in damaged(pack, outside)


def test_reading_a_hostile_skip_file_is_bounded(pack):
    """A head that declares a 64 MiB skip file of one line: refused after reading two chunks, holding at most
    about twice a chunk and a line."""
    path = pack / SKIPS_PATH
    with_skips(pack, records(1))
    path.write_bytes(b"x" * (64 << 20) + b"\n")
    head = json.loads((pack / HEAD_NAME).read_bytes())
    edit_head(pack, skipped={**head["skipped"], "bytes": path.stat().st_size})
    m = open_manifest(pack)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError, match=f"a line longer than {MAX_RECORD_BYTES} bytes"):
            list(m.skip_records())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * (READ_BYTES + MAX_RECORD_BYTES) + (1 << 20)


def test_verify_reads_every_skip_record(pack):
    with_skips(pack, records(3))
    (pack / SKIPS_PATH).write_bytes((pack / SKIPS_PATH).read_bytes()[:-1])
    with pytest.raises(ManifestError, match="skipped.jsonl: .* bytes, head says"):
        verify(pack, progress=False)


def test_a_dedup_pack_keeps_its_head_small(tmp_path, corgi):
    source = tmp_path / "src" / "a"
    source.mkdir(parents=True)
    for i in range(300):
        (source / f"{i:03d}.txt").write_text("same\n")
    result = corgi("pack", tmp_path / "src", tmp_path / "out", "--dedup", "--workers", "1")
    assert result.exit_code == 0, result.output
    head = json.loads((tmp_path / "out" / HEAD_NAME).read_bytes())
    assert head["skipped"]["count"] == 299 and head["skipped"]["reasons"] == {DUPLICATE_REASON: 299}
    m = open_manifest(tmp_path / "out")
    paths = [record["path"] for record in m.skip_records()]
    assert m.num_samples == 1 and sorted(paths + [m.key(0) + ".txt"]) == [f"a/{i:03d}.txt" for i in range(300)]
    stats = corgi("stats", tmp_path / "out")
    assert "299 files skipped, of which 299 duplicates removed by --dedup" in stats.stdout

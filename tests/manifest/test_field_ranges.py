"""Every field's place in the manifest (issue 33 §1, manifest version 6): each field of each sample has its framing,
payload range and own CRC32C recorded, equal to the source file's bytes in the shard, for WebDataset and TFRecord
packs; `Manifest.field_ranges` and `label_members` hand them out as numpy arrays; older packs still open, without."""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from urllib.parse import unquote

import crc32c
import numpy as np
import pytest

from corgi_io.errors import ArgumentError, ManifestError
from corgi_io.formats.example_proto import _read_varint
from corgi_io.manifest import MANIFEST_VERSION, open_manifest
from corgi_io.packing import PackOptions, pack
from helpers.corpus_factory import write_image, write_text
from helpers.packs import resync_row_groups

DATA = Path(__file__).resolve().parents[1] / "data"
LONG = "a-very-long-name-" * 7  # with its folder and field, a member name over 100 bytes: a pax header
FORMATS = ("wds", "tfrecord")


def corpus(root: Path) -> None:
    """Samples of one to three fields (jpg/png + txt + json), labeled and not, under keys that need escaping (a
    dotted stem), a space, unicode, and a name long enough for pax headers."""
    for i, stem in enumerate(("cat/IMG_0000.v2", "cat/with space", f"dog/{LONG}", "dog/fête", "top")):
        write_image(root / f"{stem}.{'png' if i == 2 else 'jpg'}", 10 + i, 8, seed=i)
        write_text(root / f"{stem}.txt", 3 + i, seed=i)
        if i % 2 == 0:
            (root / f"{stem}.json").write_text(json.dumps({"i": i, "caption": "x" * (100 * i)}))
    write_image(root / "dog" / "alone.jpg", 9, 9, seed=9)  # one field
    write_text(root / "dog" / "words.txt", 12, seed=10)    # one field, a text primary


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """fmt -> (pack, source) of `corpus` in blocks of 2 over a few shards."""
    source = tmp_path_factory.mktemp("fields-src")
    corpus(source)
    made = {}
    for fmt in FORMATS:
        out = tmp_path_factory.mktemp(f"fields-{fmt}") / "pack"
        pack(source, out, PackOptions(format=fmt, block_samples=2, shard_bytes=12_000), progress=False)
        made[fmt] = (out, source)
    return made


def shard_bytes(m, sample: int) -> bytes:
    return (Path(m.root) / m.shards.path(int(m.samples.shard[sample]))).read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_recorded_field_range_holds_its_source_file_and_its_crc(packs, fmt):
    out, source = packs[fmt]
    m = open_manifest(out)
    assert m.version == MANIFEST_VERSION == 6 and m.has_field_ranges
    r = m.field_ranges()
    keys, seen = m.keys(), set()
    assert len(r.sample) == int(m.field_start[-1]) == sum(np.bitwise_count(np.asarray(m.samples.fields)))
    for sample, field, offset, length, crc in zip(*(a.tolist() for a in (r.sample, r.field, r.offset, r.length,
                                                                         r.crc))):
        name, key = m.fields[field], keys[sample]
        payload = shard_bytes(m, sample)[offset:offset + length]
        assert payload == (source / f"{unquote(key)}.{name}").read_bytes(), (key, name)
        assert crc32c.crc32c(payload) == crc
        seen.add((key, name))
    assert {(unquote(key), name) for key, name in seen} == {(p.relative_to(source).with_suffix("").as_posix(),
                                                             p.suffix[1:]) for p in source.rglob("*.*")}


def test_a_tar_packs_every_member_where_the_manifest_says(packs):
    """The field rows and the label members are exactly the tar's members: names, headers (pax ones included),
    payload offsets and sizes, as tarfile reads them."""
    out, _ = packs["wds"]
    m = open_manifest(out)
    r, labels, keys = m.field_ranges(), m.label_members(), m.keys()
    recorded = {(int(m.samples.shard[s]), f"{keys[s]}.{m.fields[f]}", h, o, n)
                for s, f, h, o, n in zip(*(a.tolist() for a in (r.sample, r.field, r.header, r.offset, r.length)))}
    recorded |= {(int(m.samples.shard[s]), f"{keys[s]}.cls", h, o, n)
                 for s, h, o, n in zip(*(a.tolist() for a in labels))}
    members = {(k, t.name, t.offset, t.offset_data, t.size) for k in range(len(m.shards))
               for t in tarfile.open(out / m.shards.path(k))}
    assert recorded == members
    assert any(o - h > 512 for _, name, h, o, _ in members if LONG in name)  # pax headers are framing too
    assert len(labels.sample) == int(np.sum(np.asarray(m.samples.label) >= 0)) < m.num_samples


def test_a_tfrecord_field_framing_is_its_feature_map_entry(packs):
    """[header, offset + length) of a TFRecord field is one protobuf map entry (tag 1, length-delimited) that ends
    with the field's value: the feature it is, framing and all."""
    out, _ = packs["tfrecord"]
    m = open_manifest(out)
    r = m.field_ranges()
    for sample, header, offset, length in zip(*(a.tolist() for a in (r.sample, r.header, r.offset, r.length))):
        data = shard_bytes(m, sample)
        assert m.samples.offset[sample] + 12 <= header < offset and data[header] == 0x0A
        entry, start = _read_varint(data, header + 1)
        assert start + entry == offset + length
    with pytest.raises(ArgumentError, match="a tfrecord pack has no label members"):
        m.label_members()


@pytest.mark.parametrize("fmt", FORMATS)
def test_field_ranges_select_samples_and_fields(packs, fmt):
    m = open_manifest(packs[fmt][0])
    every = m.field_ranges()
    some = m.field_ranges(2, 5, ["txt", "json"])
    wanted = (every.sample >= 2) & (every.sample < 5) & np.isin(every.field, [m.fields.index("txt"),
                                                                               m.fields.index("json")])
    for got, expected in zip(some, every):
        assert got.tolist() == expected[wanted].tolist()
    assert set(some.field.tolist()) == {m.fields.index("txt"), m.fields.index("json")}
    assert len(m.field_ranges(4, 4).sample) == 0 and len(m.field_ranges(m.num_samples, m.num_samples + 5).sample) == 0
    assert m.field_ranges(-3, 10 ** 9).sample.tolist() == every.sample.tolist()  # clamped to the pack
    with pytest.raises(ArgumentError, match=r"no field 'mp4' in this pack \(its fields: jpg, "):
        m.field_ranges(fields=["txt", "mp4"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_one_field_pack_has_one_row_per_sample_at_its_payload(tmp_path, fmt):
    for i in range(5):
        write_text(tmp_path / "src" / f"t{i}.txt", 2 + i, seed=i)
    pack(tmp_path / "src", tmp_path / "out", PackOptions(format=fmt, block_samples=2), progress=False)
    m = open_manifest(tmp_path / "out")
    r = m.field_ranges()
    s = m.samples
    assert r.sample.tolist() == list(range(5)) and set(r.field.tolist()) == {0}
    assert r.offset.tolist() == np.asarray(s.data_offset).tolist() and r.length.tolist() == np.asarray(s.bytes).tolist()
    assert len(m.label_members().sample) == 0 if fmt == "wds" else True  # unlabeled: no .cls member


@pytest.mark.parametrize("old", ["v5-wds", "v5-tfrecord", "v2-wds", "v2-tfrecord", "v1-wds"])
def test_an_old_pack_opens_and_verifies_without_field_ranges(old):
    from corgi_io.report.verify import verify

    m = open_manifest(DATA / old)
    assert not m.has_field_ranges and m.field_start is None and m.field_rows is None
    m.validate_rows()
    assert m.keys() and verify(DATA / old, progress=False).ok
    with pytest.raises(ManifestError, match=rf"(columns|manifest.npz): a version-{m.version} pack records no per-field byte ranges"
                                            r" \(version 6 on\); repack it"):
        m.field_ranges()


@pytest.mark.slow
def test_a_remote_pack_serves_its_field_ranges_from_its_row_groups(packs, http_root):
    """Over HTTP a version-6 pack's field rows come with each block's row group (columns/rows.bin)."""
    directory, base_url = http_root
    shutil.copytree(packs["wds"][0], Path(directory) / "field-ranges-wds")
    remote, local = open_manifest(base_url + "field-ranges-wds"), open_manifest(packs["wds"][0])
    assert remote.row_groups is not None
    for start, stop in ((3, 6), (0, remote.num_samples)):
        for got, expected in zip(remote.field_ranges(start, stop), local.field_ranges(start, stop)):
            assert got.tolist() == expected.tolist()
    assert [a.tolist() for a in remote.label_members()] == [a.tolist() for a in local.label_members()]


@pytest.mark.slow
def test_a_remote_head_with_a_forged_field_count_is_refused_in_one_line_before_any_allocation(packs, http_root,
                                                                                             monkeypatch):
    """counts.fields sizes the field rows a remote reader allocates: 1 << 40 of them is one ManifestError naming
    manifest.json and the numbers, not an out-of-memory error from the allocation."""
    from corgi_io.manifest import row_groups

    directory, base_url = http_root
    root = Path(directory) / "forged-field-count"
    shutil.copytree(packs["wds"][0], root)
    head = json.loads((root / "manifest.json").read_text())
    head["counts"]["fields"] = 1 << 40
    (root / "manifest.json").write_text(json.dumps(head))
    allocated = []
    monkeypatch.setattr(row_groups, "anonymous_array", lambda dtype, rows: allocated.append(rows))
    with pytest.raises(ManifestError, match=rf"forged-field-count/manifest.json: counts.fields {1 << 40} is more "
                                            rf"than counts.samples {head['counts']['samples']} x max_fields "
                                            rf"{head['max_fields']}$") as refused:
        open_manifest(base_url + "forged-field-count")
    assert "\n" not in str(refused.value) and allocated == []


# --- an untrusted manifest's field rows ------------------------------------------------------------------------

def edited(packs, tmp_path, fmt, change) -> Path:
    """A copy of the `fmt` pack whose field columns `change(arrays)` edited, its row groups rewritten to agree."""
    out = tmp_path / "pack"
    shutil.copytree(packs[fmt][0], out)
    arrays = {name: np.load(out / "columns" / f"{name}.npy") for name in
              ("field_start", "field_id", "field_framing", "field_offset", "field_length", "field_crc")}
    change(arrays)
    for name, array in arrays.items():
        np.save(out / "columns" / f"{name}.npy", array)
    resync_row_groups(out)
    return out


@pytest.mark.parametrize("change, message", [
    (lambda a: a["field_start"].__setitem__(2, a["field_start"][2] + 1), "field starts disagree with the samples' "
                                                                          "field masks"),
    (lambda a: a["field_id"].__setitem__(0, 63), "field id 63 outside the head's"),
    (lambda a: a["field_offset"].__setitem__(1, 10 ** 9), "a field's byte range lies outside its record"),
    (lambda a: a["field_length"].__setitem__(0, a["field_length"][0] - 1), "disagrees with its payload"),
    (lambda a: a["field_framing"].__setitem__(0, 10 ** 6), "lies outside its record"),
])
def test_field_rows_that_disagree_with_the_samples_are_refused_in_one_line(packs, tmp_path, change, message):
    m = open_manifest(edited(packs, tmp_path, "wds", change))
    with pytest.raises(ManifestError, match=rf"pack/columns: .*{message}") as refused:
        m.field_ranges()
    assert "\n" not in str(refused.value)


def test_field_ids_that_name_other_fields_than_the_mask_are_refused(packs, tmp_path):
    m = open_manifest(packs["wds"][0])
    many = int(np.flatnonzero(np.diff(np.asarray(m.field_start)) >= 2)[0])  # a sample of two fields or more
    row = int(m.field_start[many]) + 1
    others = [i for i in range(len(m.fields)) if not int(m.samples.fields[many]) >> i & 1]
    out = edited(packs, tmp_path, "wds", lambda a: a["field_id"].__setitem__(row, others[0]))
    with pytest.raises(ManifestError, match=r"its field rows name other fields than its field mask"):
        open_manifest(out).validate_rows()


def test_a_full_validation_holds_a_bounded_number_of_rows_fields_included(packs, monkeypatch):
    """Validation steps count a sample's field rows too: at most ROWS_AT_ONCE rows of either kind, whatever the
    fields a sample has (up to 64), per step (bar a step of one block)."""
    from corgi_io.manifest import reader

    monkeypatch.setattr(reader, "ROWS_AT_ONCE", 16)
    steps = []
    monkeypatch.setattr(reader, "check_block_rows", lambda m, lo, hi, where: steps.append((lo, hi)))
    m = open_manifest(packs["wds"][0])
    m.validate_rows()
    first, count, start = m.blocks.first, m.blocks.count, np.asarray(m.field_start)
    assert steps[0][0] == 0 and steps[-1][1] == len(first) and all(a[1] == b[0] for a, b in zip(steps, steps[1:]))
    for lo, hi in steps:
        samples = int(first[hi - 1] + count[hi - 1] - first[lo])
        fields = int(start[first[hi - 1] + count[hi - 1]] - start[first[lo]])
        assert hi - lo == 1 or samples + fields <= 16, (lo, hi, samples, fields)

"""packing.sources.wds: WebDataset tars read as a SOURCE, grouped as webdataset groups them, hostile tars refused."""
from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import tracemalloc
from pathlib import Path

import fsspec
import pytest
import webdataset

from corgi_io.errors import BadInput
from corgi_io.packing.sample import PackSample
from corgi_io.packing.sources.unit_list import Unit, list_units, read_unit


def write_samples(path, count=3):
    """A tar of `count` jpg+txt+json+cls samples written by webdataset's own TarWriter."""
    with webdataset.TarWriter(str(path)) as writer:
        for i in range(count):
            writer.write({"__key__": f"dir/s{i}", "jpg": b"\xff\xd8" + bytes([i]), "txt": f"caption {i}",
                          "json": {"i": i}, "cls": i})
    return str(path)


def expected(i):
    return PackSample(f"dir/s{i}", i, {"jpg": b"\xff\xd8" + bytes([i]), "txt": f"caption {i}".encode(),
                                       "json": json.dumps({"i": i}).encode()})


def read(path, **options):
    """(samples, skip messages) of one tar."""
    messages = []
    samples = list(read_unit(Unit("wds", str(path)), on_skip=messages.append, **options))
    return samples, messages


def member(name, data=b"z", **attributes):
    """A TarInfo and its data for `tarfile.addfile`."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for attribute, value in attributes.items():
        setattr(info, attribute, value)
    return info, io.BytesIO(data) if info.isreg() else None


def write_tar(path, members):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, data)
    return str(path)


def test_samples_come_out_exactly_as_written(tmp_path):
    path = write_samples(tmp_path / "a.tar")
    assert list_units(path) == [Unit("wds", path)]
    assert read(path) == ([expected(i) for i in range(3)], [])
    assert [sample.primary() for sample in read(path)[0]] == ["jpg"] * 3


def test_the_grouping_is_webdatasets_own(tmp_path):
    path = write_tar(tmp_path / "a.tar", [member("d.v1/x.seg.PNG", b"p"), member("d.v1/x.JPG", b"j"),
                                          member("d.v1/y.tokens.npy", b"n"), member("d.v1/y.cls", b"2"),
                                          member("d.v1/x.txt", b"t")])
    stock = webdataset.tariterators.group_by_keys(
        webdataset.tariterators.tar_file_expander(webdataset.tariterators.url_opener([{"url": path}])))
    theirs = [(sample["__key__"], {name: value for name, value in sample.items() if not name.startswith("__")})
              for sample in stock]
    ours = [(sample.key, {**sample.fields, **({"cls": str(sample.label).encode()} if sample.label >= 0 else {})})
            for sample in read(path)[0]]
    assert ours == theirs


def test_a_gzipped_tar_and_an_fsspec_url_read_the_same(tmp_path):
    path = write_samples(tmp_path / "a.tar")
    data = Path(path).read_bytes()
    (tmp_path / "a.tar.gz").write_bytes(gzip.compress(data))
    with fsspec.open("memory://sources/a.tar", "wb") as f:
        f.write(data)
    assert read(tmp_path / "a.tar.gz") == read(path)
    assert list_units("memory://sources") == [Unit("wds", "memory://sources/a.tar")]
    assert read("memory://sources/a.tar") == read(path)


def test_keys_split_at_the_first_dot_of_the_base_name_and_fields_are_lower_case(tmp_path):
    path = write_tar(tmp_path / "a.tar", [member("d.v1/x.seg.PNG", b"p"), member("d.v1/x.JPG", b"j"),
                                          member("d.v1/y.tokens.npy", b"n"), member("d.v1/x.txt", b"t")])
    assert read(path) == ([PackSample("d.v1/x", -1, {"seg.png": b"p", "jpg": b"j"}),
                           PackSample("d.v1/y", -1, {"tokens.npy": b"n"}),
                           PackSample("d.v1/x", -1, {"txt": b"t"})], [])  # not consecutive: two samples, as webdataset


def test_label_field_names_the_label_and_a_bad_label_skips_its_sample(tmp_path):
    path = write_tar(tmp_path / "a.tar", [member("a.jpg"), member("a.class", b"4\n"), member("a.cls", b"1"),
                                          member("b.jpg"), member("b.class", b"cat")])
    samples, messages = read(path, label_field="class")
    assert samples == [PackSample("a", 4, {"jpg": b"z", "cls": b"1"})]
    assert messages == [f"skipped {path}: member 'b.class': label b'cat' is not an integer from 0 to 2147483647"]


HOSTILE = [
    (member("../up.jpg"), "member '../up.jpg': key '../up' has a '..' component"),
    (member("/abs.jpg"), "member '/abs.jpg': key '/abs' starts with '/'"),
    (member("a/./b.jpg"), "member 'a/./b.jpg': key 'a/./b' has a '.' component"),
    (member("sym.jpg", type=tarfile.SYMTYPE, linkname="/etc/passwd"),
     "member 'sym.jpg': is a symbolic link, not a regular file (not followed)"),
    (member("hard.jpg", type=tarfile.LNKTYPE, linkname="ok.jpg"),
     "member 'hard.jpg': is a hard link, not a regular file (not followed)"),
    (member("dev.jpg", type=tarfile.CHRTYPE, devmajor=1, devminor=3),
     "member 'dev.jpg': is a character device, not a regular file (not followed)"),
    (member("blk.jpg", type=tarfile.BLKTYPE), "member 'blk.jpg': is a block device, not a regular file (not followed)"),
    (member("fifo.jpg", type=tarfile.FIFOTYPE), "member 'fifo.jpg': is a FIFO, not a regular file (not followed)"),
    (member("bad.J/PG"), "member 'bad.J/PG': has no extension to name a field"),
    (member("bad.jp g"), ("member 'bad.jp g': field name 'jp g' is not lower-case letters, digits and '_' in parts "
                          "joined by '.' or '-' (at most 64 characters)")),
    (member("code.pyd"), "member 'code.pyd': field 'pyd' is a pickle, which is never packed"),
    (member("model.PTH"), "member 'model.PTH': field 'pth' is a pickle, which is never packed"),
    (member("obj.x.pickle"), "member 'obj.x.pickle': field 'x.pickle' is a pickle, which is never packed"),
    (member("obj.pkl"), "member 'obj.pkl': field 'pkl' is a pickle, which is never packed"),
    (member("obj.pyd.gz"), "member 'obj.pyd.gz': field 'pyd.gz' is a pickle, which is never packed"),
    (member("noext"), "member 'noext': has no extension to name a field"),
]


@pytest.mark.parametrize("hostile, message", HOSTILE, ids=[message.split("'")[1] for _, message in HOSTILE])
def test_a_hostile_member_is_skipped_with_one_line_and_never_followed(tmp_path, hostile, message):
    path = write_tar(tmp_path / "a.tar", [member("ok.jpg", b"good"), hostile, member("next.txt", b"t")])
    assert read(path) == ([PackSample("ok", -1, {"jpg": b"good"}), PackSample("next", -1, {"txt": b"t"})],
                          [f"skipped {path}: {message}"])
    with pytest.raises(BadInput, match="^" + re.escape(f"{path}: {message}") + "$"):
        read(path, strict=True)


def test_a_directory_member_is_not_a_sample_and_not_a_problem(tmp_path):
    path = write_tar(tmp_path / "a.tar", [member("d", type=tarfile.DIRTYPE), member("d/x.jpg")])
    assert read(path) == ([PackSample("d/x", -1, {"jpg": b"z"})], [])


def test_a_size_past_the_end_of_the_file_ends_the_file(tmp_path):
    ok, big = tarfile.TarInfo("ok.jpg"), tarfile.TarInfo("big.jpg")
    ok.size, big.size = 1, 10 ** 6
    body = ok.tobuf(tarfile.USTAR_FORMAT) + b"z" + b"\0" * 511
    path = tmp_path / "a.tar"
    path.write_bytes(body + big.tobuf(tarfile.USTAR_FORMAT) + b"x" * 100)  # 100 of the 10**6 bytes, no end marker
    samples, messages = read(path)
    assert samples == [PackSample("ok", -1, {"jpg": b"z"})]
    assert messages == [(f"skipped {path}: member 'big.jpg': declares 1000000 bytes at byte offset {len(body) + 512}, "
                         f"past the end of the file ({len(body) + 612} bytes); the rest of the file is not read")]
    zipped = tmp_path / "a.tar.gz"  # the tar's size is known only at the gzip's end: the short read tells
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    assert read(zipped) == ([PackSample("ok", -1, {"jpg": b"z"})],
                            [(f"skipped {zipped}: member 'big.jpg': truncated: 100 of 1000000 bytes at byte offset "
                              f"{len(body) + 512}; the rest of the file is not read")])


def test_a_member_above_the_limit_is_skipped_and_so_is_a_huge_pax_header(tmp_path):
    path = write_tar(tmp_path / "a.tar", [member("big.jpg", b"x" * 5000), member("ok.jpg")])
    assert read(path, max_member_bytes=1000) == (
        [PackSample("ok", -1, {"jpg": b"z"})],
        [f"skipped {path}: member 'big.jpg': 5000 bytes, above max_member_bytes=1000"])
    pax = tarfile.TarInfo("p.jpg")
    pax.pax_headers = {"comment": "c" * 5000}
    path = write_tar(tmp_path / "b.tar", [member("ok.jpg"), (pax, io.BytesIO(b""))])
    samples, messages = read(path, max_member_bytes=1000)
    assert samples == [PackSample("ok", -1, {"jpg": b"z"})]
    assert messages == [(f"skipped {path}: byte offset 1024: bad tar header (a read of 5120 bytes, above the limit "
                         f"of 2024); the rest of the file is not read")]


def test_a_repeated_field_and_a_damaged_tail_are_reported(tmp_path):
    path = write_tar(tmp_path / "a.tar", [member("a.jpg"), member("a.jpg", b"again"), member("b.txt")])
    assert read(path) == ([PackSample("a", -1, {"jpg": b"z"}), PackSample("b", -1, {"txt": b"z"})],
                          [f"skipped {path}: member 'a.jpg': repeats field 'jpg' of sample 'a'"])
    data = bytearray(Path(path).read_bytes())
    path = tmp_path / "damaged.tar"
    data[2048: 2048 + 512] = b"garbage!" * 64  # the third member's header
    path.write_bytes(bytes(data))
    samples, messages = read(path)
    assert samples == [PackSample("a", -1, {"jpg": b"z"})]
    assert messages[-1] == (f"skipped {path}: byte offset 2048: bytes after the last valid tar member do not "
                            f"parse; the rest of the file is not read")
    zipped = tmp_path / "damaged.tar.gz"
    zipped.write_bytes(gzip.compress(bytes(data)))
    assert read(zipped) == (samples, [message.replace(str(path), str(zipped)) for message in messages])


def test_not_a_tar_is_one_line(tmp_path):
    (tmp_path / "a.tar").write_bytes(b"this is not a tar file" * 40)
    samples, messages = read(tmp_path / "a.tar")
    assert samples == [] and len(messages) == 1
    assert messages[0].startswith(f"skipped {tmp_path / 'a.tar'}: byte offset 0: ")


def test_memory_stays_bounded_over_a_long_tar(tmp_path):
    path = tmp_path / "long.tar"
    with webdataset.TarWriter(str(path)) as writer:
        for i in range(8000):
            writer.write({"__key__": f"s{i:06d}", "jpg": bytes(3000), "cls": i % 10})
    assert path.stat().st_size > 30_000_000
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_unit(Unit("wds", str(path))))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 8000
    assert peak < 2_000_000, peak  # the file is 30 MB; one sample and tarfile's buffers are held at a time

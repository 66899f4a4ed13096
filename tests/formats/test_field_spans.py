"""Each format's `encode` says where every field of a record lies (its FieldSpans), and `parse_block` finds the same
places in the bytes: checked for any key, field names, payloads and label (hypothesis), and against tarfile."""
from __future__ import annotations

import io
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st

from corgi_io.formats import RESERVED_FIELDS, get_format
from corgi_io.manifest.names import key_problem

KEY_PART = st.text(alphabet="abcz09_- %éü日", min_size=1, max_size=40)
KEYS = st.builds(lambda folders, last: "/".join([*folders, last]), st.lists(st.text(alphabet="abc.é ", min_size=1,
                                                                                    max_size=70), max_size=2), KEY_PART)
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}(\.[a-z]{1,4})?", fullmatch=True).filter(lambda n: n not in RESERVED_FIELDS)
FIELDS = st.dictionaries(NAMES, st.binary(max_size=1500), min_size=1, max_size=5)


def encoded(fmt: str, key: str, fields: dict, label: int):
    primary, *rest = fields
    parts, spans = get_format(fmt).encode(key, primary, fields[primary], label, 1, [(n, fields[n]) for n in rest])
    return primary, b"".join(parts), spans


@settings(max_examples=150, deadline=None)
@given(fmt=st.sampled_from(["wds", "tfrecord"]), key=KEYS.filter(lambda k: key_problem(k) is None), fields=FIELDS,
       label=st.integers(-1, 10 ** 12))
def test_the_spans_of_an_encoded_record_locate_every_field_and_parse_back(fmt, key, fields, label):
    primary, record, spans = encoded(fmt, key, fields, label)
    assert sorted(span.name for span in spans) == sorted(fields)
    for span in spans:
        assert record[span.offset:span.offset + span.length] == fields[span.name]
    ends = [0] + [span.offset + span.length for span in spans]
    assert all(end <= span.header < span.offset for end, span in zip(ends, spans))  # in order, framing first
    (parsed,) = get_format(fmt).parse_block(record)
    assert parsed.spans == spans and parsed.key == key and parsed.label == label
    assert parsed.data_offset == next(span.offset for span in spans if span.name == primary)


@settings(max_examples=60, deadline=None)
@given(key=KEYS.filter(lambda k: key_problem(k) is None), fields=FIELDS, label=st.integers(-1, 999))
def test_a_tar_records_spans_are_its_members_as_tarfile_reads_them(key, fields, label):
    """Headers included: a pax header (a member name over 100 bytes) is part of its member's framing."""
    _, record, spans = encoded("wds", key, fields, label)
    members = list(tarfile.open(fileobj=io.BytesIO(record + b"\0" * 1024)))
    assert [(m.name, m.offset, m.offset_data, m.size) for m in members[:len(spans)]] == \
        [(f"{key}.{s.name}", s.header, s.offset, s.length) for s in spans]
    assert [m.name for m in members[len(spans):]] == ([f"{key}.cls"] if label >= 0 else [])

"""The few bytes of protobuf wire format that a corgi tf.train.Example needs, encoded and decoded here.

Why not the `tfrecord` package's Example class: importing any part of `tfrecord` imports
torch (0.98 s here), which `corgi pack`/`stats`/`verify` must not pay, and its map
serialisation orders features differently from one process to the next, so identical
packs came out with different bytes.  This encoder is deterministic (features sorted by
name, as protobuf's deterministic mode does) and is checked against the stock `tfrecord`
reader in the tests.

Wire format: Example{features=1: Features{feature=1: map<string, Feature>}},
Feature{bytes_list=1: BytesList{value=1}, float_list=2, int64_list=3: Int64List{value=1, packed}}.
"""
from __future__ import annotations

LENGTH_DELIMITED, VARINT, FIXED64, FIXED32 = 2, 0, 1, 5
BYTES_LIST, FLOAT_LIST, INT64_LIST = 1, 2, 3


def varint(value: int) -> bytes:
    """Base-128 varint; negative ints as 64-bit two's complement (10 bytes), as protobuf does for int64."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(field: int, payload_length: int) -> bytes:
    return varint(field << 3 | LENGTH_DELIMITED) + varint(payload_length)


def encode_example(bytes_features: dict, int_features: dict) -> tuple:
    """(list of byte strings forming one serialized Example, {name: (where its map entry starts, where its value
    starts)} of each bytes feature).

    Returning parts lets a large payload be written without copying it into the message.
    """
    entries = []  # (everything of a map entry before its bytes value, the bytes value, feature name)
    for name in sorted({**bytes_features, **int_features}):
        key = name.encode("utf-8")
        key_field = _delimited(1, len(key)) + key
        if name in bytes_features:
            value = bytes_features[name]
            bytes_list = _delimited(1, len(value))
            feature = _delimited(BYTES_LIST, len(bytes_list) + len(value)) + bytes_list
            head = key_field + _delimited(2, len(feature) + len(value)) + feature
        else:
            packed = varint(int(int_features[name]))
            int64_list = _delimited(1, len(packed)) + packed
            feature = _delimited(INT64_LIST, len(int64_list)) + int64_list
            head, value = key_field + _delimited(2, len(feature)) + feature, b""
        entries.append((_delimited(1, len(head) + len(value)) + head, value, name))
    parts = [_delimited(1, sum(len(head) + len(value) for head, value, _ in entries))]
    position, offsets = len(parts[0]), {}
    for head, value, name in entries:
        parts += [head, value]
        offsets[name] = (position, position + len(head))
        position += len(head) + len(value)
    return parts, {name: offsets[name] for name in bytes_features}


def _read_varint(buffer, position: int) -> tuple:
    result = shift = 0
    while True:
        if position >= len(buffer):
            raise ValueError("varint runs past the end of the record")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields(buffer, start: int, end: int):
    """(field number, wire type, value or (start, end) of a delimited payload, where its tag starts) over
    buffer[start:end]."""
    position = start
    while position < end:
        at = position
        tag, position = _read_varint(buffer, position)
        field, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, position = _read_varint(buffer, position)
        elif wire == LENGTH_DELIMITED:
            length, position = _read_varint(buffer, position)
            value, position = (position, position + length), position + length
        elif wire in (FIXED64, FIXED32):
            value, position = None, position + (8 if wire == FIXED64 else 4)
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if position > end:
            raise ValueError("field runs past the end of its message")
        yield field, wire, value, at


def _span(value, what: str) -> tuple:
    """`value` when it is a delimited payload's (start, end), else ValueError naming `what`: a record whose
    protobuf holds an int where a message or bytes belong (type confusion, which parses but means nothing)."""
    if not isinstance(value, tuple):
        raise ValueError(f"{what} is not length-delimited")
    return value


def _delimited_fields(buffer, span, what: str):
    """`_fields` of a message that must be length-delimited (see `_span`)."""
    return _fields(buffer, *_span(span, what))


def decode_example(buffer) -> dict:
    """{name: list of bytes values (as (start, end) spans of `buffer`) or list of ints} of a serialized Example.

    Every malformed Example raises ValueError (UnicodeDecodeError for a name that is not UTF-8), nothing else:
    the bytes are untrusted, and a wire type other than the schema's is refused where it matters."""
    return {name: values for name, _, values in feature_entries(buffer)}


def feature_entries(buffer):
    """(name, where its map entry's tag starts, its values as `decode_example` gives them) of each feature of a
    serialized Example, in the order the bytes hold them (a name repeated: the last one is the feature)."""
    for field, _, span, _ in _fields(buffer, 0, len(buffer)):
        if field != 1:
            continue
        for entry_field, _, entry, at in _delimited_fields(buffer, span, "Example.features"):
            if entry_field != 1:
                continue
            name, value = "", []  # protobuf's default for a map entry without its key
            for key_field, _, part, _ in _delimited_fields(buffer, entry, "a feature map entry"):
                if key_field == 1:
                    name = bytes(buffer[slice(*_span(part, "a feature's name"))]).decode("utf-8")
                elif key_field == 2:
                    value = _feature_values(buffer, part)
            yield name, at, value


def _feature_values(buffer, span) -> list:
    """The values of one Feature message: (start, end) spans for a bytes_list, ints for an int64_list
    (packed or not), none for a float_list."""
    values = []
    for kind, _, inner, _ in _delimited_fields(buffer, span, "a Feature"):
        if kind not in (BYTES_LIST, INT64_LIST):
            continue
        for field, wire, item, _ in _delimited_fields(buffer, inner, "a feature's value list"):
            if field != 1:
                continue
            if kind == BYTES_LIST:
                values.append(_span(item, "a bytes_list value"))
            elif wire == VARINT:
                values.append(_signed(item))
            elif wire == LENGTH_DELIMITED:  # packed
                position = item[0]
                while position < item[1]:
                    number, position = _read_varint(buffer, position)
                    values.append(_signed(number))
                if position > item[1]:
                    raise ValueError("a packed int64_list runs past its end")
            else:
                raise ValueError(f"an int64_list value has wire type {wire}")
    return values


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value

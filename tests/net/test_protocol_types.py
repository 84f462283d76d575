"""Primitive types: known encodings from the protocol guide, round trips, and bounded reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from net.protocol import types as t
from net.protocol.types import ProtocolDecodeError, Reader


def _written(write, *args) -> bytes:
    out: list = []
    write(*args, out)
    return b"".join(out)


@pytest.mark.parametrize(
    "value, encoded",
    [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16384, "808001"), (2**32 - 1, "ffffffff0f")],
)
def test_unsigned_varint_known_encodings(value, encoded):
    assert _written(t.write_unsigned_varint, value) == bytes.fromhex(encoded)
    assert Reader(bytes.fromhex(encoded)).unsigned_varint() == value


@pytest.mark.parametrize("value, encoded", [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (64, "8001")])
def test_varint_is_zigzag_encoded(value, encoded):
    assert _written(t.write_varint, value) == bytes.fromhex(encoded)
    assert Reader(bytes.fromhex(encoded)).varint() == value


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_varint_and_varlong_round_trip(int32, int64):
    reader = Reader(_written(t.write_varint, int32) + _written(t.write_varlong, int64))
    assert (reader.varint(), reader.varlong()) == (int32, int64)
    assert reader.remaining == 0


def test_varints_longer_than_their_width_are_refused():
    with pytest.raises(ProtocolDecodeError):
        Reader(bytes.fromhex("8080808080")).unsigned_varint()  # 6th byte would be needed
    with pytest.raises(ProtocolDecodeError):
        Reader(bytes.fromhex("ffffffff7f")).varint()  # 35 bits do not fit an int32
    with pytest.raises(t.ProtocolEncodeError):
        t.zigzag32(2**31)


@settings(max_examples=200, deadline=None)
@given(st.none() | st.text(max_size=40), st.booleans())
def test_nullable_strings_round_trip_in_both_encodings(value, compact):
    reader = Reader(_written(t.write_string, value, compact, True))
    assert reader.string(compact, nullable=True) == value
    assert reader.remaining == 0


@settings(max_examples=200, deadline=None)
@given(st.none() | st.binary(max_size=64), st.booleans())
def test_nullable_bytes_and_records_round_trip_in_both_encodings(value, compact):
    encoded = _written(t.write_bytes, value, compact, True)
    assert Reader(encoded).bytes_(compact, nullable=True) == value
    records = Reader(encoded).records(compact, nullable=True)
    assert (records is None and value is None) or bytes(records) == value


def test_null_is_refused_where_the_version_does_not_allow_it():
    with pytest.raises(t.ProtocolEncodeError):
        _written(t.write_string, None, False, False)
    with pytest.raises(ProtocolDecodeError):
        Reader(bytes.fromhex("ffff")).string(nullable=False)
    with pytest.raises(ProtocolDecodeError):
        Reader(bytes.fromhex("00")).string(compact=True, nullable=False)


def test_compact_lengths_are_offset_by_one():
    assert _written(t.write_string, "ab", True, False) == bytes.fromhex("036162")
    assert _written(t.write_string, None, True, True) == bytes.fromhex("00")
    assert _written(t.write_bytes, b"", True, False) == bytes.fromhex("01")


def test_fixed_width_reads_past_the_end_raise_decode_error():
    for read in (Reader.int8, Reader.int16, Reader.int32, Reader.int64, Reader.uint32, Reader.float64, Reader.uuid):
        with pytest.raises(ProtocolDecodeError):
            read(Reader(b""))
    with pytest.raises(ProtocolDecodeError):
        Reader(b"\x00\x00\x00").int32()


def test_a_reader_window_does_not_read_beyond_its_end():
    reader = Reader(b"\x00\x01\x02\x03\x04\x05", pos=1, end=3)
    assert reader.int16() == 0x0102
    with pytest.raises(ProtocolDecodeError):
        reader.int8()


def test_tagged_field_sections_round_trip_and_keep_payloads_as_views():
    encoded = _written(t.write_tagged_fields, [(0, b"\x01"), (5, b"abc")])
    assert encoded == bytes.fromhex("02" "00" "01" "01" "05" "03" "616263")
    assert [(tag, bytes(payload)) for tag, payload in Reader(encoded).tagged_fields()] == [(0, b"\x01"), (5, b"abc")]

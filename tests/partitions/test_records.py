"""Record batch v2 codec: varints, build/decode round trips, header fields, control batches, iterators."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions import batch as batch_header
from partitions.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from partitions.errors import CorruptRecordError, InvalidRecordError
from partitions.records import (
    ABORT,
    COMMIT,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    NO_TIMESTAMP,
    ControlRecordType,
    Record,
    build_batch,
    build_control_batch,
    control_record_type,
    decode_batch,
    decode_batches,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    iter_records,
    parse_control_record,
)

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]

# --- varints -------------------------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trips_over_the_int32_range(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded + b"\xff", 0) == (value, len(encoded))
    assert len(encoded) <= 5


@settings(max_examples=500, deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trips_over_the_int64_range(value):
    encoded = encode_varlong(value)
    assert decode_varlong(b"\x00" + encoded, 1) == (value, 1 + len(encoded))
    assert len(encoded) <= 10


@pytest.mark.parametrize(
    "value, encoded",  # Kafka ByteUtilsTest: zig-zag then base 128, little-endian groups
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"), (300, b"\xd8\x04"),
     (INT32_MAX, b"\xfe\xff\xff\xff\x0f"), (INT32_MIN, b"\xff\xff\xff\xff\x0f")],
)  # fmt: skip
def test_varint_bytes_match_java_byte_utils(value, encoded):
    assert encode_varint(value) == encoded
    assert encode_varlong(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


def test_varlong_extremes_take_ten_bytes():
    assert encode_varlong(INT64_MIN) == b"\xff" * 9 + b"\x01"
    assert encode_varlong(INT64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"


def test_encode_refuses_values_outside_the_range():
    with pytest.raises(ValueError):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(ValueError):
        encode_varlong(INT64_MIN - 1)


@pytest.mark.parametrize(
    "encoded",
    [b"", b"\x80", b"\xff\xff", b"\xff\xff\xff\xff\xff\x01", b"\xff\xff\xff\xff\x1f"],
    ids=["empty", "truncated", "truncated2", "six-bytes", "over-32-bits"],
)
def test_decode_varint_rejects_truncated_long_or_overflowing_input(encoded):
    with pytest.raises(CorruptRecordError):
        decode_varint(encoded)


def test_decode_varlong_rejects_eleven_bytes_and_over_64_bits():
    with pytest.raises(CorruptRecordError):
        decode_varlong(b"\xff" * 10 + b"\x01")
    with pytest.raises(CorruptRecordError):
        decode_varlong(b"\xff" * 9 + b"\x03")


# --- round trips ---------------------------------------------------------------------------------------

payloads = st.none() | st.binary(max_size=300)
headers_strategy = st.lists(st.tuples(st.text(max_size=20), payloads), max_size=4).map(tuple)
# Any int64 timestamps: deltas are varlongs that wrap like Java's long arithmetic.
timestamps = st.integers(INT64_MIN, INT64_MAX) | st.integers(-10, 2_000_000_000_000)


@st.composite
def record_lists(draw, max_size=20):
    """(base_offset, records) with increasing offsets, sometimes with gaps (as in a compacted batch)."""
    base_offset = draw(st.integers(0, 2**62))
    fields = st.tuples(st.integers(1, 1000) | st.just(1), timestamps, payloads, payloads, headers_strategy)
    offset = base_offset + draw(st.integers(0, 5))
    records = []
    for gap, timestamp, key, value, headers in draw(st.lists(fields, max_size=max_size)):
        records.append(Record(offset, timestamp, key, value, headers))
        offset += gap
    return base_offset, records


@settings(max_examples=120, deadline=None)
@given(record_lists(), st.sampled_from(ALL_CODECS), st.booleans())
def test_records_round_trip_through_every_codec(base_and_records, codec, transactional):
    base_offset, records = base_and_records
    batch = build_batch(
        records, base_offset=base_offset, compression=codec, producer_id=7 if transactional else -1,
        producer_epoch=3 if transactional else -1, base_sequence=11 if transactional else -1,
        is_transactional=transactional, partition_leader_epoch=5,
    )  # fmt: skip
    decoded = decode_batch(batch)
    assert decoded.records == records
    header = decoded.header
    assert header.base_offset == base_offset
    assert header.compression == (codec if records else NONE)
    assert header.records_count == len(records)
    assert header.partition_leader_epoch == 5
    assert header.is_transactional == transactional and not header.is_control
    if records:
        assert header.last_offset == records[-1].offset
        assert header.max_timestamp == max(r.timestamp for r in records)
        assert header.base_timestamp == records[0].timestamp


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(payloads, payloads, headers_strategy, timestamps), min_size=1, max_size=20))
def test_key_value_tuples_take_offset_deltas_zero_to_n_minus_one(items):
    decoded = decode_batch(build_batch(items, base_offset=1000))
    assert [r.offset for r in decoded.records] == list(range(1000, 1000 + len(items)))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded.records] == items
    assert decoded.header.last_offset_delta == len(items) - 1


def test_plain_key_value_pairs_take_base_timestamp():
    decoded = decode_batch(build_batch([(b"k", b"v"), (None, None)], base_timestamp=1_700_000_000_000))
    assert [r.timestamp for r in decoded.records] == [1_700_000_000_000] * 2
    assert decoded.records[1] == Record(1, 1_700_000_000_000, None, None)


def test_items_without_any_timestamp_get_no_timestamp():
    decoded = decode_batch(build_batch([(b"k", b"v")]))
    assert decoded.records[0].timestamp == NO_TIMESTAMP == decoded.header.max_timestamp


def test_timestamp_deltas_are_relative_to_the_first_record_and_may_be_negative():
    batch = build_batch([(b"a", b"1", (), 5_000), (b"b", b"2", (), 4_000), (b"c", b"3", (), 9_000)])
    header = batch_header.parse_header(batch)
    assert (header.base_timestamp, header.max_timestamp) == (5_000, 9_000)
    assert [r.timestamp for r in decode_batch(batch).records] == [5_000, 4_000, 9_000]


def test_extreme_timestamps_wrap_like_java_longs():
    records = [Record(0, INT64_MAX, None, b"x"), Record(1, INT64_MIN, None, b"y")]
    assert decode_batch(build_batch(records)).records == records


def test_empty_key_and_value_differ_from_null():
    records = [Record(0, 1, b"", None), Record(1, 1, None, b""), Record(2, 1, b"", b"")]
    assert decode_batch(build_batch(records)).records == records


def test_large_values_use_multi_byte_lengths():
    records = [Record(0, 1, b"k" * 20_000, b"v" * 200_000, (("h" * 100, b"z" * 9000),))]
    for codec in ALL_CODECS:
        assert decode_batch(build_batch(records, compression=codec)).records == records


def test_record_attributes_round_trip_as_int8():
    records = [Record(0, 1, None, b"x", (), -128), Record(1, 1, None, b"y", (), 127)]
    assert decode_batch(build_batch(records)).records == records


def test_non_utf8_header_key_survives_decode_and_reencode_byte_for_byte():
    batch = bytearray(build_batch([Record(0, 1, None, b"v", (("ab", b"1"),))]))
    position = batch.index(b"ab")
    batch[position] = 0xFF  # not UTF-8
    struct.pack_into(">I", batch, batch_header.CRC_POSITION, batch_header.compute_crc(batch))
    record = decode_batch(bytes(batch)).records[0]
    assert build_batch([record]) == bytes(batch)


def test_batch_passes_the_header_views_validation_and_crc():
    batch = build_batch([(b"k", b"v")], compression=ZSTD, producer_id=9, producer_epoch=2, base_sequence=40)
    header = batch_header.validate_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 40)
    assert header.magic == 2 and header.size == len(batch)


@given(st.binary(min_size=batch_header.HEADER_SIZE, max_size=batch_header.HEADER_SIZE))
def test_a_header_built_from_its_fields_equals_the_dataclass_built_from_them(raw):
    values = batch_header.HEADER.unpack(raw)
    fast = batch_header.header_from_fields(values)
    assert fast == batch_header.BatchHeader(*values)
    assert hash(fast) == hash(batch_header.BatchHeader(*values))


def test_stamped_batch_still_decodes_with_new_offsets():  # offsets and leader epoch sit outside the CRC
    batch = bytearray(build_batch([(b"a", b"1"), (b"b", b"2")]))
    batch_header.stamp_batch(batch, 500, 9)
    decoded = decode_batch(bytes(batch))
    assert [r.offset for r in decoded.records] == [500, 501]
    assert decoded.header.partition_leader_epoch == 9


def test_log_append_time_gives_every_record_the_max_timestamp():
    batch = build_batch([(b"a", b"1", (), 10), (b"b", b"2", (), 20)], log_append_time=True)
    decoded = decode_batch(batch)
    assert decoded.header.is_log_append_time
    assert [r.timestamp for r in decoded.records] == [20, 20]
    stamped = bytearray(build_batch([(b"a", b"1", (), 10)]))
    batch_header.set_log_append_time(stamped, 99)
    assert decode_batch(bytes(stamped)).records[0].timestamp == 99


def test_delete_horizon_replaces_base_timestamp_and_sets_bit_6():  # KIP-534
    records = [Record(3, 50, b"k", None)]
    batch = build_batch(records, delete_horizon_ms=1_000, last_offset_delta=5)
    decoded = decode_batch(batch)
    assert decoded.header.has_delete_horizon
    assert decoded.header.base_timestamp == 1_000
    assert decoded.header.last_offset_delta == 5
    assert decoded.records == records


def test_empty_batch_keeps_producer_state_and_last_offset_delta():
    batch = build_batch([], base_offset=40, producer_id=4, producer_epoch=1, base_sequence=7, last_offset_delta=9)
    decoded = decode_batch(batch)
    assert decoded.records == []
    assert decoded.header.records_count == 0
    assert decoded.header.next_offset == 50
    assert decoded.header.last_sequence == 16


def test_builder_refuses_non_increasing_offsets_and_bad_fields():
    with pytest.raises(ValueError):
        build_batch([Record(5, 0, None, b"a"), Record(5, 0, None, b"b")], base_offset=5)
    with pytest.raises(ValueError):
        build_batch([Record(4, 0, None, b"a")], base_offset=5)
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v")], producer_epoch=1 << 15)
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v")], base_timestamp=1, delete_horizon_ms=2)
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v"), (b"k", b"v")], last_offset_delta=0)


# --- control batches -----------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([ABORT, COMMIT]), st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
    st.integers(INT32_MIN, INT32_MAX), st.integers(0, 2**50), st.integers(0, 2**60),
)  # fmt: skip
def test_control_batch_round_trips(kind, producer_id, producer_epoch, coordinator_epoch, timestamp, offset):
    batch = build_control_batch(kind, producer_id, producer_epoch, coordinator_epoch, timestamp, base_offset=offset)
    decoded = decode_batch(batch)
    header = decoded.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (producer_id, producer_epoch, -1)
    [record] = decoded.records
    assert (record.offset, record.timestamp) == (offset, timestamp)
    assert parse_control_record(record) == (kind, coordinator_epoch)


def test_control_record_wire_layout_is_version_and_type_then_version_and_epoch():
    [record] = decode_batch(build_control_batch(COMMIT, 1, 0, 77, 5)).records
    assert record.key == b"\x00\x00\x00\x01"
    assert record.value == b"\x00\x00" + (77).to_bytes(4, "big")


def test_parse_control_record_rejects_malformed_markers():
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, b"\x00\x00", b"\x00" * 6))
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, b"\xff\xff\x00\x01", b"\x00" * 6))  # negative version
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, b"\x00\x00\x00\x02", b"\x00" * 6))  # not a marker type
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00"))
    assert control_record_type(Record(0, 0, b"\x00\x00\x00\x03", None)) == 3
    assert ControlRecordType(1) is COMMIT


def test_build_control_batch_refuses_other_kinds():
    with pytest.raises(ValueError):
        build_control_batch(2, 1, 0, 0, 0)


# --- iterators -----------------------------------------------------------------------------------------


def test_iter_records_walks_every_batch_and_flags_control_records():
    data = (
        build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0, producer_id=3, producer_epoch=0,
                    base_sequence=0, is_transactional=True)
        + build_control_batch(COMMIT, 3, 0, 1, 10, base_offset=2)
        + build_batch([(b"c", b"3")], base_offset=3, compression=GZIP)
    )  # fmt: skip
    seen = [(header.is_control, record.offset, record.key) for header, record in iter_records(data)]
    assert seen == [(False, 0, b"a"), (False, 1, b"b"), (True, 2, b"\x00\x00\x00\x01"), (False, 3, b"c")]


def test_decode_batches_yields_empty_batches_so_consumers_advance():
    data = build_batch([(b"a", b"1")]) + build_batch([], base_offset=1, last_offset_delta=4)
    assert [d.header.next_offset for d in decode_batches(data)] == [1, 6]


def test_partial_tail_is_skipped_by_default_and_refused_when_strict():
    whole = build_batch([(b"a", b"1")])
    data = whole + build_batch([(b"b", b"2")], base_offset=1)[:-3]
    assert [r.key for _, r in iter_records(data)] == [b"a"]
    with pytest.raises(CorruptRecordError):
        list(iter_records(data, allow_partial_tail=False))
    assert len(list(iter_records(whole, allow_partial_tail=False))) == 1

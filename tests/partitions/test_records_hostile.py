"""Hostile input: garbage, mutated and truncated batches, and hand-made malformed records raise only typed
KafkaErrors with clear messages (never IndexError, struct.error or UnicodeDecodeError)."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions import batch as batch_header
from partitions.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from partitions.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from partitions.records import build_batch, decode_batch, encode_varint, iter_records

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
ITEMS = [(b"key-%d" % i, b"value-%d" % i * (i % 5), (("h", b"x"),) if i % 3 else (), 1000 + i) for i in range(12)]


def reframe(records_section: bytes, records_count: int, codec: int = NONE, last_offset_delta: int = 0) -> bytes:
    """A batch with a valid header and CRC around an arbitrary records section, so the record decoder
    itself is what gets tested (not the CRC check)."""
    batch = bytearray(build_batch([]))
    batch += compress(codec, records_section) if codec else records_section
    struct.pack_into(">i", batch, batch_header.BATCH_LENGTH_POSITION, len(batch) - batch_header.LOG_OVERHEAD)
    struct.pack_into(">h", batch, batch_header.ATTRIBUTES_POSITION, codec)
    struct.pack_into(">i", batch, 23, last_offset_delta)
    struct.pack_into(">i", batch, 57, records_count)
    struct.pack_into(">I", batch, batch_header.CRC_POSITION, batch_header.compute_crc(batch))
    return bytes(batch)


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


GOOD_BODY = b"\x00" + b"\x00" + b"\x00" + b"\x02k" + b"\x02v" + b"\x00"  # attrs, ts, offset, key, value, headers


def test_reframe_helper_builds_a_batch_we_accept():
    assert decode_batch(reframe(record(GOOD_BODY), 1)).records[0].value == b"v"


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_kafka_errors(garbage):
    with pytest.raises(KafkaError):
        decode_batch(garbage)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120), st.integers(0, 40), st.sampled_from(ALL_CODECS))
def test_garbage_records_section_with_valid_crc_raises_only_kafka_errors(section, count, codec):
    try:
        decode_batch(reframe(section, count, codec, last_offset_delta=count))
    except KafkaError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.data())
def test_flipped_byte_is_caught(codec, data):
    batch = bytearray(build_batch(ITEMS, compression=codec))
    position = data.draw(st.integers(0, len(batch) - 1))
    batch[position] ^= data.draw(st.integers(1, 255))
    if position < batch_header.MAGIC_POSITION and position not in range(8, 12):
        decode_batch(bytes(batch))  # base_offset and partition_leader_epoch sit outside the CRC
    else:
        with pytest.raises(KafkaError):
            decode_batch(bytes(batch))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.data())
def test_flipped_byte_in_records_section_with_recomputed_crc_raises_only_kafka_errors(codec, data):
    section = build_batch(ITEMS)[batch_header.HEADER_SIZE :]
    mutated = bytearray(section)
    position = data.draw(st.integers(0, len(mutated) - 1))
    mutated[position] ^= data.draw(st.integers(1, 255))
    try:
        decode_batch(reframe(bytes(mutated), len(ITEMS), codec, last_offset_delta=len(ITEMS) - 1))
    except KafkaError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.data())
def test_truncated_batch_raises_corrupt_record(codec, data):
    batch = build_batch(ITEMS, compression=codec)
    cut = data.draw(st.integers(0, len(batch) - 1))
    with pytest.raises(CorruptRecordError):
        decode_batch(batch[:cut])


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_iter_records_over_garbage_raises_only_kafka_errors(garbage):
    data = build_batch(ITEMS[:2]) + garbage
    try:
        list(iter_records(data, allow_partial_tail=False))
    except KafkaError:
        pass


def test_bad_crc_is_named_in_the_error():
    batch = bytearray(build_batch(ITEMS))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(bytes(batch))


def test_other_magic_is_unsupported_for_message_format():
    batch = bytearray(build_batch(ITEMS))
    batch[batch_header.MAGIC_POSITION] = 1
    with pytest.raises(UnsupportedForMessageFormatError):
        decode_batch(bytes(batch))


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_bits_raise_unsupported_compression_type(codec_id):
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_batch(reframe(b"whatever", 1, codec_id))


def test_decompression_bound_applies_to_the_records_section():
    batch = build_batch([(None, bytes(1_000_000))], compression=ZSTD)
    with pytest.raises(RecordTooLargeError):
        decode_batch(batch, decompressed_bytes_max=100_000)
    assert decode_batch(batch).records[0].value == bytes(1_000_000)


@pytest.mark.parametrize(
    "section, count, message",
    [
        (record(GOOD_BODY), 2, "impossible|truncated"),  # records_count above what is present
        (record(GOOD_BODY) * 2, 1, "after the last"),  # records_count below: trailing bytes
        (record(GOOD_BODY) + b"\x00", 1, "after the last"),  # trailing garbage
        (encode_varint(200) + GOOD_BODY, 1, "record length"),  # record length past the end
        (encode_varint(-5) + GOOD_BODY + b"\x00" * 10, 1, "record length"),  # negative record length
        (record(GOOD_BODY[:3] + b"\x03k" + GOOD_BODY[5:]), 1, "key length -2"),  # negative key length
        (record(GOOD_BODY[:3] + b"\x7ek" + GOOD_BODY[5:]), 1, "key length 63"),  # key past the record
        (record(GOOD_BODY[:5] + b"\x05v" + GOOD_BODY[7:]), 1, "value length -3"),
        (record(GOOD_BODY[:7] + b"\x01"), 1, "headers_count -1"),  # negative header count
        (record(GOOD_BODY[:7] + b"\x02" + b"\x01" + b"\x00"), 1, "header key length -1"),  # null header key
        (record(GOOD_BODY[:7] + b"\x02" + b"\x02h" + b"\x09"), 1, "header value length -5"),
        (record(GOOD_BODY + b"\x00\x00"), 1, "record ends"),  # record length longer than its fields
        (record(GOOD_BODY[:1] + b"\xff" * 11 + GOOD_BODY[2:]), 1, "longer than 10 bytes"),  # varlong too long
        (record(b"\x00\x00" + b"\xff\xff\xff\xff\x7f" + GOOD_BODY[3:]), 1, "overflows 32 bits"),
        (record(GOOD_BODY[:-1]), 1, "truncated"),  # the last record's fields run off the section
    ],
    ids=[
        "count-above", "count-below", "trailing", "length-past-end", "negative-length", "negative-key-length",
        "key-past-record", "negative-value-length", "negative-headers-count", "null-header-key",
        "negative-header-value-length", "record-longer-than-fields", "varlong-too-long", "varint-overflow",
        "fields-past-section",
    ],
)  # fmt: skip
def test_malformed_records_raise_corrupt_record_with_a_clear_message(section, count, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode_batch(reframe(section, count, last_offset_delta=count))


def test_offset_deltas_out_of_order_or_past_last_offset_delta_are_invalid_records():
    first = record(GOOD_BODY[:2] + b"\x02" + GOOD_BODY[3:])  # offset delta 1
    second = record(GOOD_BODY)  # offset delta 0
    with pytest.raises(InvalidRecordError, match="offset delta"):
        decode_batch(reframe(first + second, 2, last_offset_delta=1))
    with pytest.raises(InvalidRecordError, match="offset delta"):
        decode_batch(reframe(first, 1, last_offset_delta=0))


def test_huge_records_count_fails_fast_without_looping():
    with pytest.raises(CorruptRecordError, match="impossible"):
        decode_batch(reframe(record(GOOD_BODY), 2**31 - 1, last_offset_delta=2**31 - 1))


def test_huge_header_count_fails_fast():
    with pytest.raises(CorruptRecordError, match="headers_count"):
        decode_batch(reframe(record(GOOD_BODY[:7] + encode_varint(2**30)), 1))


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_records_section_cut_at_any_byte_with_valid_crc_raises_corrupt_record(codec):
    section = build_batch(ITEMS)[batch_header.HEADER_SIZE :]
    for cut in range(len(section)):
        with pytest.raises(CorruptRecordError):
            decode_batch(reframe(section[:cut], len(ITEMS), codec, last_offset_delta=len(ITEMS) - 1))

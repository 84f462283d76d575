"""Hostile input: random bytes, truncations, mutations and absurd lengths only ever raise typed KafkaErrors,
and a length field is checked against the bytes that remain before anything is allocated."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from net.protocol import codec, messages
from net.protocol.codec import RequestHeader
from net.protocol.types import ProtocolDecodeError
from partitions.errors import KafkaError
from tests.net.test_protocol_strategies import all_api_versions, message_strategy

API_VERSIONS = all_api_versions()
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_request_or_kafka_error(frame: bytes) -> None:
    try:
        codec.decode_request(frame)
    except KafkaError:
        pass


@FUZZ
@given(st.binary(max_size=200))
def test_random_request_frames_raise_only_kafka_errors(frame):
    _decode_request_or_kafka_error(frame)


@FUZZ
@given(st.sampled_from(API_VERSIONS), st.binary(max_size=200))
def test_random_bodies_behind_a_valid_header_raise_only_kafka_errors(api_version, body):
    api_key, version = api_version
    header = bytes(codec.encode_request(RequestHeader(api_key, version, 1, "c"), messages.REQUESTS[api_key]())[4:])
    header_size = 8 + 2 + 1 + (1 if codec.is_flexible(api_key, version) else 0)
    _decode_request_or_kafka_error(header[:header_size] + body)


@FUZZ
@given(st.sampled_from(API_VERSIONS), st.binary(max_size=200))
def test_random_response_frames_raise_only_kafka_errors(api_version, frame):
    api_key, version = api_version
    try:
        codec.decode_response(api_key, version, frame)
    except KafkaError:
        pass


@pytest.mark.parametrize("api_version", API_VERSIONS[::3], ids=str)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_every_truncation_of_a_valid_frame_raises_decode_error(api_version, data):
    api_key, version = api_version
    request = data.draw(message_strategy(messages.REQUESTS[api_key], version))
    frame = codec.encode_request(RequestHeader(api_key, version, 1, "c"), request)[4:]
    for end in range(len(frame)):
        with pytest.raises(ProtocolDecodeError):
            codec.decode_request(frame[:end])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), api_version=st.sampled_from(API_VERSIONS))
def test_mutated_valid_frames_raise_only_kafka_errors(data, api_version):
    api_key, version = api_version
    response = data.draw(message_strategy(messages.RESPONSES[api_key], version))
    frame = bytearray(codec.encode_response(RequestHeader(api_key, version, 1, "c"), response)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(frame) - 1))
        frame[position] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
    try:
        codec.decode_response(api_key, version, bytes(frame))
    except KafkaError:
        pass


HUGE_LENGTHS = [
    # Produce v7: transactional_id null, acks, timeout, then a topic array claiming 2^31-1 topics.
    ("0000" "0007" "00000001" "0000" "ffff" "ffff" "00000000" "7fffffff", "array"),
    # ... one topic whose name claims 32767 bytes.
    ("0000" "0007" "00000001" "0000" "ffff" "ffff" "00000000" "00000001" "7fff" "61", "string"),
    # ... one topic "t", one partition, records claiming 2^31-1 bytes.
    ("0000" "0007" "00000001" "0000" "ffff" "ffff" "00000000" "00000001" "0001" "74" "00000001" "00000000"
     "7fffffff", "records"),
    # Negative lengths other than -1, and -1 where null is not allowed.
    ("0000" "0007" "00000001" "0000" "ffff" "ffff" "00000000" "fffffffe", "negative array"),
    ("0000" "0007" "00000001" "0000" "ffff" "ffff" "00000000" "00000001" "ffff", "null non-nullable string"),
    ("0000" "0007" "00000001" "0000" "ffff" "ffff" "00000000" "00000001" "0001" "74" "00000001" "00000000"
     "fffffff0", "negative records"),
    # ApiVersions v3 (flexible): a compact string claiming 2^35 bytes through an over-long varint, and a
    # tag section claiming 2^28 fields.
    ("0012" "0003" "00000001" "ffff" "00" "ffffffff7f", "varint"),
    ("0012" "0003" "00000001" "ffff" "80808080" "01", "tag count"),
]


@pytest.mark.parametrize("frame_hex, what", HUGE_LENGTHS, ids=[what for _, what in HUGE_LENGTHS])
def test_absurd_lengths_are_refused_before_allocation(frame_hex, what):
    started = time.perf_counter()
    with pytest.raises(ProtocolDecodeError):
        codec.decode_request(bytes.fromhex(frame_hex))
    assert time.perf_counter() - started < 0.5, f"{what}: refusing must not walk or allocate the claimed size"


def test_an_array_count_beyond_the_remaining_bytes_is_refused_even_when_items_are_small():
    # DeleteGroups v0: an array of strings (each >= 2 bytes); 3 items claimed, 5 bytes left.
    frame = bytes.fromhex("002a" "0000" "00000001" "ffff" "00000003" "0000" "0000" "00")
    with pytest.raises(ProtocolDecodeError, match="array of 3 items"):
        codec.decode_request(frame)


def test_invalid_utf8_is_a_decode_error():
    frame = bytes.fromhex("0012" "0000" "00000001" "0002" "c328")
    with pytest.raises(ProtocolDecodeError, match="UTF-8"):
        codec.decode_request(frame)


def test_a_known_tagged_field_with_extra_bytes_is_refused():
    # ApiVersions v3 response, body tags: tag 1 (int64) declared with 9 bytes.
    frame = bytes.fromhex("00000001" "0000" "01" "00000000" "01" "01" "09" "000000000000000100")
    with pytest.raises(ProtocolDecodeError, match="extra bytes"):
        codec.decode_response(18, 3, frame)

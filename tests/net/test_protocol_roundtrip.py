"""Ours -> ours: every request and response of every implemented version survives a full frame round trip."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings, strategies as st

from net.protocol import codec, messages
from net.protocol.codec import RequestHeader
from partitions.errors import ErrorCode
from tests.net.test_protocol_strategies import all_api_versions, message_strategy

API_VERSIONS = all_api_versions()


def _id(api_version: tuple[int, int]) -> str:
    api_key, version = api_version
    return f"{codec.ApiKey(api_key).name}-v{version}"


@pytest.mark.parametrize("api_version", API_VERSIONS, ids=_id)
@settings(max_examples=15, deadline=None)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1), client_id=st.none() | st.text(max_size=8))
def test_request_frame_round_trips(api_version, data, correlation_id, client_id):
    api_key, version = api_version
    request = data.draw(message_strategy(messages.REQUESTS[api_key], version))
    header = RequestHeader(api_key, version, correlation_id, client_id)
    frame = codec.encode_request(header, request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert b"".join(codec.encode_request_parts(header, request)) == frame  # the vectored send's bytes are the same
    decoded_header, decoded = codec.decode_request(frame[4:], strict=True)
    assert decoded_header == header
    assert decoded == request


@pytest.mark.parametrize("api_version", API_VERSIONS, ids=_id)
@settings(max_examples=15, deadline=None)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_response_frame_round_trips(api_version, data, correlation_id):
    api_key, version = api_version
    response = data.draw(message_strategy(messages.RESPONSES[api_key], version))
    # An ApiVersions answer with UNSUPPORTED_VERSION is read as v0 whatever was asked (KIP-511), and brokers
    # send it so: the golden-bytes tests cover it.
    assume(not (api_key == codec.ApiKey.API_VERSIONS and response.error_code == ErrorCode.UNSUPPORTED_VERSION))
    frame = codec.encode_response(RequestHeader(api_key, version, correlation_id, "c"), response)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded_correlation_id, decoded = codec.decode_response(api_key, version, frame[4:], strict=True)
    assert decoded_correlation_id == correlation_id
    assert decoded == response


def test_every_api_of_the_brief_is_implemented_in_its_version_range():
    expected = {
        0: (3, 12), 1: (4, 17), 2: (1, 10), 3: (0, 12), 8: (2, 9), 9: (1, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4),
        13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2),
        22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (0, 1), 28: (0, 5), 32: (0, 4),
        33: (0, 2), 37: (0, 3), 42: (0, 2), 44: (0, 1), 47: (0, 0), 60: (0, 2), 61: (0, 0), 65: (0, 0),
        66: (0, 1), 17: (0, 1), 36: (0, 2), 29: (0, 3), 30: (0, 3), 31: (0, 3), 48: (0, 1), 49: (0, 1),
        50: (0, 0), 51: (0, 0),
        43: (0, 2), 45: (0, 0), 46: (0, 0), 64: (0, 0), 68: (0, 1), 69: (0, 0), 35: (0, 4), 75: (0, 0), 55: (0, 2), 34: (0, 2), 71: (0, 0), 72: (0, 0), 74: (0, 0),
        57: (0, 2),  # UpdateFeatures (KIP-584)
    }
    assert codec.SUPPORTED == expected


def test_records_decode_as_a_zero_copy_slice_of_the_frame():
    batch = bytes(range(256)) * 4
    request = messages.ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name="t", partition_data=[messages.ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    frame = memoryview(codec.encode_request(RequestHeader(0, 7, 1, "p"), request))[4:]
    _, decoded = codec.decode_request(frame)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame.obj  # a view of the frame, not a copy
    assert records == batch


def test_records_given_as_several_buffers_are_sent_back_to_back():
    parts = [b"first-batch", memoryview(b"second-batch")]
    response = messages.FetchResponse(
        responses=[
            messages.FetchResponse.FetchableTopicResponse(
                topic="t", partitions=[messages.FetchResponse.PartitionData(partition_index=0, records=parts)]
            )
        ]
    )
    frame = codec.encode_response(RequestHeader(1, 11, 9, "c"), response)
    _, decoded = codec.decode_response(1, 11, frame[4:])
    assert decoded.responses[0].partitions[0].records == b"first-batchsecond-batch"


def test_fields_absent_in_a_version_take_their_defaults_on_decode():
    # LogStartOffset exists from Produce response v5; a v4 response decodes with Kafka's default -1.
    response = messages.ProduceResponse(
        responses=[
            messages.ProduceResponse.TopicProduceResponse(
                name="t",
                partition_responses=[
                    messages.ProduceResponse.PartitionProduceResponse(index=0, base_offset=5, log_start_offset=3)
                ],
            )
        ]
    )
    decoded = messages.ProduceResponse.decode(response.encode(4), 4)
    assert decoded.responses[0].partition_responses[0].log_start_offset == -1
    assert messages.ProduceResponse.decode(response.encode(5), 5) == response


def test_message_classes_have_value_equality_defaults_and_a_readable_repr():
    request = messages.FetchRequest(max_wait_ms=500)
    assert request == messages.FetchRequest(max_wait_ms=500)
    assert request != messages.FetchRequest(max_wait_ms=501)
    assert request.replica_id == -1 and request.max_bytes == 0x7FFFFFFF and request.session_epoch == -1
    assert "max_wait_ms=500" in repr(request)
    with pytest.raises(TypeError):
        messages.FetchRequest(no_such_field=1)
    # Mutable defaults are per instance.
    other = messages.FetchRequest()
    other.topics.append(messages.FetchRequest.FetchTopic(topic="x"))
    assert messages.FetchRequest().topics == []


def test_fetch_request_carries_the_replica_id_of_a_follower():
    request = messages.FetchRequest(replica_id=3, max_wait_ms=100, min_bytes=1, isolation_level=0)
    frame = codec.encode_request(RequestHeader(1, 11, 2, "broker-3"), request)
    _, decoded = codec.decode_request(frame[4:])
    assert decoded.replica_id == 3

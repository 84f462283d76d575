"""The sans-IO ClientConnection against a broker half built from the codec: bytes in, bytes out, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from net.client.connection import ClientConnection, ClientProtocolError, ConnectionState, choose_version
from net.protocol import messages
from net.protocol.codec import (
    SUPPORTED,
    ApiKey,
    FrameReader,
    api_versions_response,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
)
from partitions.errors import ErrorCode, UnsupportedVersionError


class BrokerHalf:
    """The broker end of a fake link: decodes the client's frames and answers from a version table."""

    def __init__(self, supported: dict[int, tuple[int, int]]):
        self.supported = supported
        self.reader = FrameReader()
        self.headers = []

    def requests(self, data: bytes):
        self.reader.receive_data(data)
        while (frame := self.reader.next_frame()) is not None:
            header, request = decode_request(frame)
            self.headers.append(header)
            yield header, request

    def answer_api_versions(self, header) -> bytes:
        lowest, highest = self.supported[ApiKey.API_VERSIONS]
        if header.api_version > highest:
            return encode_api_versions_fallback(header, self.supported)
        return encode_response(header, api_versions_response(ErrorCode.NONE, self.supported))


def negotiate(connection: ClientConnection, broker: BrokerHalf) -> None:
    while connection.state is ConnectionState.NEW:
        for header, _ in broker.requests(connection.initiate()):
            connection.receive_data(broker.answer_api_versions(header))
        assert connection.next_response() is not None


def test_negotiation_picks_min_of_our_max_and_broker_max():
    broker = BrokerHalf({**SUPPORTED, ApiKey.PRODUCE: (3, 7), ApiKey.FETCH: (0, SUPPORTED[ApiKey.FETCH][1] + 1)})
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    assert connection.state is ConnectionState.READY
    assert connection.version_for(ApiKey.PRODUCE) == 7  # the broker's max is lower
    assert connection.version_for(ApiKey.FETCH) == SUPPORTED[ApiKey.FETCH][1]  # ours is lower
    assert broker.headers[0].api_version == SUPPORTED[ApiKey.API_VERSIONS][1]


def test_api_versions_falls_back_to_broker_version_on_unsupported_version():  # KIP-511
    broker = BrokerHalf({**SUPPORTED, ApiKey.API_VERSIONS: (0, 1)})
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    assert [h.api_version for h in broker.headers] == [SUPPORTED[ApiKey.API_VERSIONS][1], 1]
    assert connection.state is ConnectionState.READY
    assert connection.version_for(ApiKey.API_VERSIONS) == 1


def test_no_common_version_raises_unsupported_version():
    with pytest.raises(UnsupportedVersionError):
        choose_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: (13, 13)})
    with pytest.raises(UnsupportedVersionError):
        choose_version(ApiKey.PRODUCE, {})


def test_send_before_negotiation_is_a_protocol_error():
    connection = ClientConnection("c1")
    with pytest.raises(ClientProtocolError, match="NEW"):
        connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))


def _metadata_response(header, controller_id):
    return encode_response(header, messages.MetadataResponse(controller_id=controller_id))


def test_pipelined_responses_match_in_order_with_correlation_ids():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    sent = [connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None)) for _ in range(3)]
    assert connection.in_flight_count == 3
    headers = [header for _, data in sent for header, _ in broker.requests(data)]
    assert [h.correlation_id for h in headers] == [cid for cid, _ in sent]
    wire = b"".join(_metadata_response(h, controller_id=index) for index, h in enumerate(headers))
    for byte in range(0, len(wire), 5):  # dribble the bytes in to exercise framing
        connection.receive_data(wire[byte : byte + 5])
    answers = []
    while (item := connection.next_response()) is not None:
        answers.append(item)
    assert [(cid, message.controller_id) for cid, message in answers] == [(sent[i][0], i) for i in range(3)]
    assert connection.in_flight_count == 0


def test_response_out_of_order_is_a_protocol_error():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    first = connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    second = connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    headers = [h for _, data in (first, second) for h, _ in broker.requests(data)]
    connection.receive_data(_metadata_response(headers[1], 1))
    with pytest.raises(ClientProtocolError, match="oldest in flight"):
        connection.next_response()
    assert connection.state is ConnectionState.ERROR
    with pytest.raises(ClientProtocolError):
        connection.receive_data(b"\x00")


def test_unsolicited_response_is_a_protocol_error():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    _, data = connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    (header, _), = broker.requests(data)
    connection.receive_data(_metadata_response(header, 1) * 2)
    assert connection.next_response() is not None
    with pytest.raises(ClientProtocolError, match="nothing in flight"):
        connection.next_response()


def test_acks_zero_produce_is_never_in_flight():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    request = messages.ProduceRequest(acks=0, timeout_ms=1000, topic_data=[])
    correlation_id, data, expects = connection.send_request_parts(ApiKey.PRODUCE, request)
    assert not expects and connection.in_flight_count == 0
    _, acked = connection.send_request(ApiKey.PRODUCE, messages.ProduceRequest(acks=1, timeout_ms=1, topic_data=[]))
    assert connection.in_flight_count == 1


def test_inflight_limit_refuses_one_more_request():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1", inflight_requests_max=2)
    negotiate(connection, broker)
    for _ in range(2):
        connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    with pytest.raises(ClientProtocolError, match="in flight"):
        connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))


def test_hostile_frame_length_is_refused_before_buffering():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1", frame_bytes_max=1024)
    negotiate(connection, broker)
    with pytest.raises(ClientProtocolError, match="bad frame"):
        connection.receive_data(b"\x7f\xff\xff\xff")
    assert connection.state is ConnectionState.ERROR


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=4, max_size=64))
def test_garbage_response_body_raises_only_protocol_error(body):
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    correlation_id, _ = connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    frame = correlation_id.to_bytes(4, "big") + body
    connection.receive_data(len(frame).to_bytes(4, "big") + frame)
    try:
        assert connection.next_response() is not None
    except ClientProtocolError:
        assert connection.state is ConnectionState.ERROR


def test_correlation_ids_wrap_at_int32_max():
    broker = BrokerHalf(dict(SUPPORTED))
    connection = ClientConnection("c1")
    negotiate(connection, broker)
    connection._next_correlation_id = 0x7FFFFFFF
    first, _ = connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    second, _ = connection.send_request(ApiKey.METADATA, messages.MetadataRequest(topics=None))
    assert (first, second) == (0x7FFFFFFF, 0)

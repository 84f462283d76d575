"""Golden bytes computed by hand from the protocol guide: ApiVersions v0-3 and the header rules around them; Fetch
v13, v15 and v16 (flexible, topic ids, ReplicaState, tagged CurrentLeader and NodeEndpoints)."""

from __future__ import annotations

import uuid

import pytest

from net.protocol import codec, messages
from net.protocol.codec import RequestHeader, UnsupportedRequestVersionError
from partitions.errors import ErrorCode, UnsupportedVersionError

ApiVersionsRequest = messages.ApiVersionsRequest
ApiVersionsResponse = messages.ApiVersionsResponse

# Request header v1: api_key 18, version, correlation_id 1, client_id "c" (int16 length 1, then 0x63).
REQUEST_V0_TO_V2 = {
    version: bytes.fromhex("0000000b" "0012" f"000{version}" "00000001" "0001" "63") for version in (0, 1, 2)
}
# Header v2 = v1 + empty tag section (client_id stays a non-compact string); body: compact strings "py", "1",
# empty tag section.
REQUEST_V3 = bytes.fromhex("00000012" "0012" "0003" "00000001" "0001" "63" "00" "03" "7079" "02" "31" "00")

API_KEYS = [(0, 3, 8), (18, 0, 3)]
API_KEYS_INT32_ARRAY = "00000002" "0000" "0003" "0008" "0012" "0000" "0003"
RESPONSE_V0 = bytes.fromhex("00000016" "00000001" "0000" + API_KEYS_INT32_ARRAY)
RESPONSE_V1_V2 = bytes.fromhex("0000001a" "00000001" "0000" + API_KEYS_INT32_ARRAY + "00000000")
# v3: response header v0 (no tag section, KIP-511), compact array (count + 1), a tag section per entry, the
# throttle time, then the body's tag section.
RESPONSE_V3 = bytes.fromhex(
    "0000001a" "00000001" "0000" "03" "0000" "0003" "0008" "00" "0012" "0000" "0003" "00" "00000000" "00"
)


def _response(**extra) -> messages.ApiVersionsResponse:
    api_keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in API_KEYS]
    return ApiVersionsResponse(error_code=0, api_keys=api_keys, **extra)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_api_versions_request_v0_to_v2_golden_bytes(version):
    header = RequestHeader(18, version, 1, "c")
    assert codec.encode_request(header, ApiVersionsRequest()) == REQUEST_V0_TO_V2[version]
    assert codec.decode_request(REQUEST_V0_TO_V2[version][4:], strict=True) == (header, ApiVersionsRequest())


def test_api_versions_request_v3_golden_bytes_with_flexible_header_v2():
    header = RequestHeader(18, 3, 1, "c")
    request = ApiVersionsRequest(client_software_name="py", client_software_version="1")
    assert codec.encode_request(header, request) == REQUEST_V3
    assert codec.decode_request(REQUEST_V3[4:], strict=True) == (header, request)


def test_api_versions_response_v0_golden_bytes():
    header = RequestHeader(18, 0, 1, "c")
    assert codec.encode_response(header, _response()) == RESPONSE_V0
    assert codec.decode_response(18, 0, RESPONSE_V0[4:], strict=True) == (1, _response())


@pytest.mark.parametrize("version", [1, 2])
def test_api_versions_response_v1_v2_golden_bytes(version):
    header = RequestHeader(18, version, 1, "c")
    assert codec.encode_response(header, _response()) == RESPONSE_V1_V2
    assert codec.decode_response(18, version, RESPONSE_V1_V2[4:], strict=True) == (1, _response())


def test_api_versions_response_v3_keeps_response_header_v0():
    header = RequestHeader(18, 3, 1, "c")
    assert codec.encode_response(header, _response()) == RESPONSE_V3
    assert codec.decode_response(18, 3, RESPONSE_V3[4:], strict=True) == (1, _response())
    assert codec.response_header_version(18, 3) == 0


def test_api_versions_response_v3_writes_non_default_tagged_fields_in_tag_order():
    # FinalizedFeaturesEpoch is tag 1 (int64): count 1, tag 1, size 8, value.
    frame = codec.encode_response(RequestHeader(18, 3, 1, "c"), _response(finalized_features_epoch=5))
    assert frame[-11:] == bytes.fromhex("01" "01" "08" "0000000000000005")
    assert frame[:4] == (0x1A - 1 + 11).to_bytes(4, "big")  # the empty section (1 byte) became 11 bytes
    assert codec.decode_response(18, 3, frame[4:], strict=True)[1].finalized_features_epoch == 5


def test_unknown_tagged_fields_are_skipped_on_decode():
    # The body tag section of RESPONSE_V3 replaced by: tag 7 (unknown, 3 bytes) then tag 1 (known).
    body_tags = bytes.fromhex("02" "07" "03" "aabbcc" "01" "08" "0000000000000009")
    frame = RESPONSE_V3[4:-1] + body_tags
    _, response = codec.decode_response(18, 3, frame, strict=True)
    assert response.finalized_features_epoch == 9
    assert response.api_keys == _response().api_keys


def test_flexible_responses_other_than_api_versions_use_response_header_v1():
    # DescribeCluster v0 is flexible: correlation_id then an empty tag section before the body.
    frame = codec.encode_response(RequestHeader(60, 0, 7, "c"), messages.DescribeClusterResponse())
    assert frame[4:9] == bytes.fromhex("00000007" "00")
    assert codec.response_header_version(60, 0) == 1
    assert codec.response_header_version(3, 8) == 0


def test_api_versions_request_v4_of_kafka_python_3_decodes_as_v3_does():  # ApiVersionsRequest.json v4
    # kafka-python 3.0 opens with ApiVersions v4: v3's fields (KAFKA-17011 changed only what the answer holds).
    frame = bytes.fromhex("0012" "0004" "0000002a" "0002" "6b70" "00" "03" "6b70" "02" "33" "00")
    header, request = codec.decode_request(frame, strict=True)
    assert header == RequestHeader(18, 4, 42, "kp")
    assert request == ApiVersionsRequest(client_software_name="kp", client_software_version="3")
    assert codec.encode_response(RequestHeader(18, 4, 1, "c"), _response()) == RESPONSE_V3


def test_api_versions_request_of_an_unsupported_version_carries_its_header():
    # A client newer than us opens with ApiVersions v5 (flexible, with a body we do not parse).
    frame = bytes.fromhex("0012" "0005" "0000002a" "0002" "6b70" "00" "03" "6b70" "02" "33" "00")
    with pytest.raises(UnsupportedRequestVersionError) as raised:
        codec.decode_request(frame)
    assert isinstance(raised.value, UnsupportedVersionError)
    assert raised.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert raised.value.header == RequestHeader(18, 5, 42, "kp")


def test_api_versions_fallback_answers_v0_with_error_35_and_our_key_list():
    # KIP-511: the broker answers in v0 whatever version was asked, so the client can read it.
    fallback = codec.encode_api_versions_fallback(RequestHeader(18, 4, 42, "kp"), {0: (3, 8), 18: (0, 3)})
    assert fallback == bytes.fromhex("00000016" "0000002a" "0023" + API_KEYS_INT32_ARRAY)
    # A client that asked v3 decodes that v0 answer thanks to the error-code peek.
    correlation_id, response = codec.decode_response(18, 3, fallback[4:], strict=True)
    assert correlation_id == 42 and response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == API_KEYS


def test_unknown_api_key_raises_unsupported_version_with_the_header():
    frame = bytes.fromhex("0063" "0000" "00000005" "ffff")
    with pytest.raises(UnsupportedRequestVersionError) as raised:
        codec.decode_request(frame)
    assert raised.value.header == RequestHeader(99, 0, 5, None)


@pytest.mark.parametrize("api_key, version", [(0, 2), (0, 13), (1, 3), (1, 18), (3, 13)])
def test_versions_outside_supported_are_refused_both_ways(api_key, version):
    request_class = messages.REQUESTS[api_key]
    frame = codec.encode_request(RequestHeader(api_key, 3 if api_key == 0 else 4, 1, "c"), request_class())[4:]
    frame = frame[:2] + version.to_bytes(2, "big") + frame[4:]
    with pytest.raises(UnsupportedRequestVersionError):
        codec.decode_request(frame)
    with pytest.raises(UnsupportedVersionError):
        codec.encode_request(RequestHeader(api_key, version, 1, "c"), request_class())
    with pytest.raises(UnsupportedVersionError):
        codec.decode_response(api_key, version, b"\x00\x00\x00\x01")


def test_trailing_bytes_are_ignored_unless_strict():
    frame = REQUEST_V0_TO_V2[0][4:] + b"\x00\x01"
    assert codec.decode_request(frame)[1] == ApiVersionsRequest()
    with pytest.raises(codec.ProtocolDecodeError):
        codec.decode_request(frame, strict=True)


def test_encode_refuses_a_message_of_another_api():
    with pytest.raises(codec.ProtocolEncodeError):
        codec.encode_response(RequestHeader(18, 0, 1, "c"), messages.MetadataResponse())
    with pytest.raises(codec.ProtocolEncodeError):
        codec.encode_request(RequestHeader(18, 0, 1, "c"), ApiVersionsResponse())


def test_encode_refuses_values_the_version_cannot_carry():
    with pytest.raises(codec.ProtocolEncodeError):  # int16 overflow
        codec.encode_response(RequestHeader(18, 0, 1, "c"), ApiVersionsResponse(error_code=1 << 15))
    with pytest.raises(codec.ProtocolEncodeError):  # null in a non-nullable string
        codec.encode_request(RequestHeader(3, 0, 1, "c"), messages.MetadataRequest(
            topics=[messages.MetadataRequest.MetadataRequestTopic(name=None)]))
    with pytest.raises(codec.ProtocolEncodeError):  # null topics array is only allowed from Metadata v1
        codec.encode_request(RequestHeader(3, 0, 1, "c"), messages.MetadataRequest(topics=None))
    assert codec.encode_request(RequestHeader(3, 1, 1, "c"), messages.MetadataRequest(topics=None))


def test_frame_reader_splits_a_stream_into_frames():
    reader = codec.FrameReader()
    stream = REQUEST_V0_TO_V2[0] + REQUEST_V3
    for index in range(len(stream)):  # one byte at a time
        reader.receive_data(stream[index : index + 1])
    assert reader.next_frame() == REQUEST_V0_TO_V2[0][4:]
    assert reader.next_frame() == REQUEST_V3[4:]
    assert reader.next_frame() is None and reader.buffered_bytes == 0


@pytest.mark.parametrize("prefix", ["ffffffff", "80000000", "00000401"])
def test_frame_reader_refuses_negative_or_oversized_lengths_before_buffering(prefix):
    reader = codec.FrameReader(frame_bytes_max=1024)
    with pytest.raises(codec.ProtocolDecodeError):
        reader.receive_data(bytes.fromhex(prefix))


def test_unregister_broker_v0_golden_bytes():
    # Kafka's UnregisterBroker JSON: v0 flexible. Request header v2: api_key 64, version 0, correlation_id 9,
    # client_id "c", empty tag section; body BrokerId int32 4, empty tag section.
    request = codec.encode_request(RequestHeader(64, 0, 9, "c"), messages.UnregisterBrokerRequest(broker_id=4))
    assert request == bytes.fromhex("00000011" "0040" "0000" "00000009" "0001" "63" "00" "00000004" "00")
    # Response header v1 (correlation id, tag section); ThrottleTimeMs, ErrorCode 42, ErrorMessage "x"
    # (compact nullable string: length + 1), tag section.
    response = messages.UnregisterBrokerResponse(throttle_time_ms=0, error_code=42, error_message="x")
    frame = codec.encode_response(RequestHeader(64, 0, 9, "c"), response)
    assert frame == bytes.fromhex("0000000e" "00000009" "00" "00000000" "002a" "02" "78" "00")
    assert codec.decode_response(64, 0, frame[4:], strict=True) == (9, response)


def test_consumer_group_heartbeat_v1_golden_bytes():
    # Kafka's ConsumerGroupHeartbeat JSON (KIP-848): every version flexible. Body: GroupId "g" (compact: 02 67),
    # MemberId "m", MemberEpoch 3, InstanceId null (00), RackId null, RebalanceTimeoutMs -1,
    # SubscribedTopicNames null (00), SubscribedTopicRegex "t.*" (v1), ServerAssignor null,
    # TopicPartitions [one: TopicId, Partitions [0, 2], tags], tags.
    import uuid

    topic_id = uuid.UUID("00112233445566778899aabbccddeeff")
    request_class = messages.ConsumerGroupHeartbeatRequest
    request = request_class(group_id="g", member_id="m", member_epoch=3, subscribed_topic_regex="t.*",
                            topic_partitions=[request_class.TopicPartitions(topic_id=topic_id, partitions=[0, 2])])
    frame = codec.encode_request(RequestHeader(68, 1, 5, "c"), request)
    body = ("0267" "026d" "00000003" "00" "00" "ffffffff" "00" "04742e2a" "00"
            "02" + topic_id.hex + "03" "00000000" "00000002" "00" "00")
    header = "0044" "0001" "00000005" "0001" "63" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + header + body
    _, decoded = codec.decode_request(frame[4:])
    assert decoded == request
    # The response's Assignment is a nullable struct: an int8 marker (-1 null, 1 present) before its fields.
    response_class = messages.ConsumerGroupHeartbeatResponse
    response = response_class(member_id="m", member_epoch=4, heartbeat_interval_ms=5000,
                              assignment=response_class.Assignment(topic_partitions=[
                                  response_class.TopicPartitions(topic_id=topic_id, partitions=[1])]))
    frame = codec.encode_response(RequestHeader(68, 1, 5, "c"), response)
    body = ("00000000" "0000" "00" "026d" "00000004" "00001388"
            "01" "02" + topic_id.hex + "02" "00000001" "00" "00" "00")
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000005" "00" + body
    assert codec.decode_response(68, 1, frame[4:], strict=True) == (5, response)
    response.assignment = None
    frame = codec.encode_response(RequestHeader(68, 1, 5, "c"), response)
    assert frame.hex().endswith("00001388" "ff" "00")


def test_consumer_group_describe_v0_golden_bytes():
    request = messages.ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=True)
    frame = codec.encode_request(RequestHeader(69, 0, 6, "c"), request)
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0045" "0000" "00000006" "0001" "63" "00" + "02" "0267" "01" "00"
    response_class = messages.ConsumerGroupDescribeResponse
    response = response_class(groups=[response_class.DescribedGroup(
        error_code=69, error_message=None, group_id="g", group_state="", group_epoch=0, assignment_epoch=0,
        assignor_name="", members=[])])
    frame = codec.encode_response(RequestHeader(69, 0, 6, "c"), response)
    # ThrottleTimeMs; Groups [ErrorCode 69, ErrorMessage null, GroupId "g", GroupState "", epochs, AssignorName "",
    # Members [], AuthorizedOperations INT32_MIN, tags], tags
    body = "00000000" "02" "0045" "00" "0267" "01" "00000000" "00000000" "01" "01" "80000000" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000006" "00" + body
    assert codec.decode_response(69, 0, frame[4:], strict=True) == (6, response)


def test_metadata_request_v12_golden_bytes_ask_by_topic_id():  # KIP-516: the topic id first, a null name
    import uuid

    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    request = messages.MetadataRequest(
        topics=[messages.MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name=None)],
        allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    frame = codec.encode_request(RequestHeader(3, 12, 7, "c"), request)
    body = "02" + topic_id.hex + "00" + "00" + "01" + "00" + "00"  # topics, id, null name, tags, auto, ops, tags
    header = "0003" "000c" "00000007" "0001" + b"c".hex() + "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + header + body
    _, decoded = codec.decode_request(frame[4:])
    assert decoded.topics[0].topic_id == topic_id and decoded.topics[0].name is None


# --- KIP-890 part 2 (transaction version 2): EndTxn v5, Produce v12, the transaction.version feature ---------

def test_end_txn_response_v5_golden_bytes_carry_the_producer_id_and_epoch():  # EndTxnResponse.json v5
    response = messages.EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=1000, producer_epoch=2)
    v5 = bytes.fromhex("00000016" "00000001" "00" "00000000" "0000" "00000000000003e8" "0002" "00")
    assert codec.encode_response(RequestHeader(26, 5, 1, "c"), response) == v5
    assert codec.decode_response(26, 5, v5[4:], strict=True) == (1, response)
    # v4 has neither field: the same answer leaves them out, and decodes with their defaults (-1).
    v4 = bytes.fromhex("0000000c" "00000001" "00" "00000000" "0000" "00")
    assert codec.encode_response(RequestHeader(26, 4, 1, "c"), response) == v4
    decoded = codec.decode_response(26, 4, v4[4:], strict=True)[1]
    assert (decoded.producer_id, decoded.producer_epoch) == (-1, -1)


def test_end_txn_request_v5_golden_bytes():
    request = messages.EndTxnRequest(transactional_id="t", producer_id=1000, producer_epoch=2, committed=True)
    frame = bytes.fromhex("0000001a" "001a" "0005" "00000001" "0001" "63" "00"
                          "0274" "00000000000003e8" "0002" "01" "00")
    assert codec.encode_request(RequestHeader(26, 5, 1, "c"), request) == frame
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(26, 5, 1, "c"), request)


def test_produce_request_v12_golden_bytes_is_flexible():  # ProduceRequest.json: flexible from v9
    request = messages.ProduceRequest(transactional_id="t", acks=-1, timeout_ms=3000, topic_data=[
        messages.ProduceRequest.TopicProduceData(name="o", partition_data=[
            messages.ProduceRequest.PartitionProduceData(index=0, records=b"\x01\x02")])])
    frame = bytes.fromhex("00000022" "0000" "000c" "00000001" "0001" "63" "00"
                          "0274" "ffff" "00000bb8" "02" "026f" "02" "00000000" "030102" "00" "00" "00")
    assert codec.encode_request(RequestHeader(0, 12, 1, "c"), request) == frame
    header, decoded = codec.decode_request(frame[4:], strict=True)
    assert header == RequestHeader(0, 12, 1, "c")
    assert bytes(decoded.topic_data[0].partition_data[0].records) == b"\x01\x02"


def test_produce_response_v12_leaves_out_default_tagged_current_leader_and_node_endpoints():  # KIP-951 tags
    response_class = messages.ProduceResponse
    response = response_class(responses=[response_class.TopicProduceResponse(name="o", partition_responses=[
        response_class.PartitionProduceResponse(index=0, error_code=0, base_offset=7)])])
    frame = bytes.fromhex("00000030" "00000001" "00" "02" "026f" "02" "00000000" "0000" "0000000000000007"
                          "ffffffffffffffff" "ffffffffffffffff" "01" "00" "00" "00" "00000000" "00")
    assert codec.encode_response(RequestHeader(0, 12, 1, "c"), response) == frame
    assert codec.decode_response(0, 12, frame[4:], strict=True) == (1, response)


def test_api_versions_v3_advertises_the_transaction_version_feature_golden_bytes():  # KIP-584, KIP-890
    features = codec.Features({"transaction.version": (0, 2)}, {"transaction.version": 2}, 5)
    response = codec.api_versions_response(0, {0: (3, 8), 18: (0, 3)}, features=features)
    name = "14" + "transaction.version".encode().hex()  # compact string: length + 1, then the bytes
    frame = bytes.fromhex(
        "0000005c" "00000001" "0000" "03" "0000" "0003" "0008" "00" "0012" "0000" "0003" "00" "00000000"
        "03"                                                   # three tagged fields, in tag order
        "00" "1a" "02" + name + "0000" "0002" "00"             # SupportedFeatures: min 0, max 2
        + "01" "08" "0000000000000005"                         # FinalizedFeaturesEpoch
        + "02" "1a" "02" + name + "0002" "0002" "00")          # FinalizedFeatures: max level 2, min level 2
    assert codec.encode_response(RequestHeader(18, 3, 1, "c"), response) == frame
    assert codec.decode_response(18, 3, frame[4:], strict=True) == (1, response)


# Fetch v13 (flexible, KIP-482; topics by id, KIP-516), by hand from FetchRequest.json: request header v2, the
# top-level ReplicaId (v0-14), compact arrays and strings (count/length + 1), LastFetchedEpoch (v12+), a tag
# section at the end of every struct.
FETCH_TOPIC_ID = "00112233445566778899aabbccddeeff"
FETCH_V13_REQUEST = bytes.fromhex(
    "0000005c" "0001" "000d" "00000007" "0001" "63" "00"  # length, api key 1, v13, correlation 7, "c", no tags
    "ffffffff" "000001f4" "00000001" "7fffffff" "00"  # replica -1, max wait 500, min bytes 1, max bytes, isolation
    "00000000" "ffffffff"  # session 0, epoch -1
    "02" + FETCH_TOPIC_ID + "02"  # one topic (by id), one partition
    "00000000" "00000005" "000000000000002a" "00000004"  # partition 0, leader epoch 5, offset 42, last epoch 4
    "ffffffffffffffff" "00100000" "00" "00"  # log start -1, partition max bytes 1 MiB, partition tags, topic tags
    "01" "01" "00"  # no forgotten topics, rack "", no tags
)
# Fetch v16 response: NOT_LEADER_OR_FOLLOWER with CurrentLeader (partition tag 1) and NodeEndpoints (top tag 0,
# KIP-951); a nested struct carries its own tag section.
FETCH_V16_RESPONSE = bytes.fromhex(
    "00000062" "00000007" "00"  # length, correlation 7, response header v1's tag section
    "00000000" "0000" "00000000"  # throttle 0, error 0, session 0
    "02" + FETCH_TOPIC_ID + "02"  # one topic (by id), one partition
    "00000000" "0006" + "ffffffffffffffff" * 3 +  # partition 0, error 6, high watermark, LSO, log start -1
    "00" "ffffffff" "01"  # aborted transactions null, preferred read replica -1, records of 0 bytes
    "01" "01" "09" "00000002" "00000006" "00"  # one tag: 1 (CurrentLeader), 9 bytes: leader 2, epoch 6, no tags
    "00"  # topic tags
    "01" "00" "0d" "02" "00000002" "0268" "00002385" "00" "00"  # tag 0 (NodeEndpoints): node 2 at h:9093, no rack
)


def test_fetch_v13_request_golden_bytes_name_the_topic_by_id():
    request_class = messages.FetchRequest
    request = request_class(max_wait_ms=500, min_bytes=1, session_id=0, session_epoch=-1, topics=[
        request_class.FetchTopic(topic_id=uuid.UUID(FETCH_TOPIC_ID), partitions=[request_class.FetchPartition(
            partition=0, current_leader_epoch=5, fetch_offset=42, last_fetched_epoch=4, partition_max_bytes=1 << 20)])])
    header = RequestHeader(1, 13, 7, "c")
    assert codec.encode_request(header, request) == FETCH_V13_REQUEST
    assert codec.decode_request(FETCH_V13_REQUEST[4:], strict=True) == (header, request)


def test_fetch_v16_response_golden_bytes_carry_the_current_leader_and_its_endpoint():
    response_class = messages.FetchResponse
    response = response_class(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        response_class.FetchableTopicResponse(topic_id=uuid.UUID(FETCH_TOPIC_ID), partitions=[
            response_class.PartitionData(partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                         high_watermark=-1, aborted_transactions=None, records=b"",
                                         current_leader=response_class.LeaderIdAndEpoch(leader_id=2, leader_epoch=6))])],
        node_endpoints=[response_class.NodeEndpoint(node_id=2, host="h", port=9093)])
    assert codec.encode_response(RequestHeader(1, 16, 7, "c"), response) == FETCH_V16_RESPONSE
    assert codec.decode_response(1, 16, FETCH_V16_RESPONSE[4:], strict=True) == (7, response)


def test_fetch_v15_request_carries_the_replica_in_replica_state_not_the_top_level_field():
    # KIP-903: ReplicaId is v0-14; from v15 the follower is ReplicaState (tag 1: ReplicaId, ReplicaEpoch).
    request_class = messages.FetchRequest
    request = request_class(max_wait_ms=0, min_bytes=1, replica_state=request_class.ReplicaState(
        replica_id=3, replica_epoch=9))
    body = request.encode(15)
    assert body == bytes.fromhex(
        "00000000" "00000001" "7fffffff" "00" "00000000" "ffffffff" "01" "01" "01"  # no replica id up front
        "01" "01" "0d" "00000003" "0000000000000009" "00")  # tag 1, 13 bytes: replica 3, epoch 9, no tags
    assert request_class.decode(body, 15, strict=True) == request


# --- Kafka 3.9's admin versions: CreateTopics v5-7, DeleteTopics v5-6, DescribeConfigs v3-4 -------------------

def test_create_topics_response_v7_golden_bytes_carry_the_id_configs_and_the_tagged_config_error():
    # CreateTopicsResponse.json: TopicId v7+ after Name; NumPartitions, ReplicationFactor, Configs v5+;
    # TopicConfigErrorCode tag 0 of the topic's tag section, written only when not 0.
    import uuid

    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    response_class = messages.CreateTopicsResponse
    response = response_class(throttle_time_ms=0, topics=[response_class.CreatableTopicResult(
        name="t", topic_id=topic_id, error_code=0, error_message=None, topic_config_error_code=29,
        num_partitions=3, replication_factor=1, configs=[response_class.CreatableTopicConfigs(
            name="a", value="b", read_only=False, config_source=5, is_sensitive=False)])])
    frame = codec.encode_response(RequestHeader(19, 7, 1, "c"), response)
    topic = ("0274" + topic_id.hex + "0000" "00" "00000003" "0001"
             "02" "0261" "0262" "00" "05" "00" "00"  # Configs: one, with its (empty) tag section
             "01" "00" "02" "001d")  # tags: one, tag 0, 2 bytes, TOPIC_AUTHORIZATION_FAILED
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" "00" + "00000000" "02" + topic + "00"
    assert codec.decode_response(19, 7, frame[4:], strict=True) == (1, response)
    # v6 has the same fields but the id; v4 (not flexible) none of them.
    v6 = codec.encode_response(RequestHeader(19, 6, 1, "c"), response)
    assert v6.hex() == f"{len(v6) - 4:08x}" + "00000001" "00" + "00000000" "02" + topic.replace(topic_id.hex, "") + "00"
    v4 = codec.encode_response(RequestHeader(19, 4, 1, "c"), response)
    assert v4.hex() == f"{len(v4) - 4:08x}" + "00000001" + "00000000" "00000001" "0001" "74" "0000" "ffff"


def test_delete_topics_request_v6_golden_bytes_name_a_topic_by_id():  # DeleteTopicsRequest.json v6
    import uuid

    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    request_class = messages.DeleteTopicsRequest
    request = request_class(topics=[request_class.DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=5000)
    frame = codec.encode_request(RequestHeader(20, 6, 1, "c"), request)
    body = "02" "00" + topic_id.hex + "00" "00001388" "00"  # Topics [Name null, TopicId, tags], TimeoutMs, tags
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0014" "0006" "00000001" "0001" "63" "00" + body
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(20, 6, 1, "c"), request)
    response_class = messages.DeleteTopicsResponse
    response = response_class(throttle_time_ms=0, responses=[response_class.DeletableTopicResult(
        name=None, topic_id=topic_id, error_code=100, error_message="x")])
    frame = codec.encode_response(RequestHeader(20, 6, 1, "c"), response)
    # Responses [Name null, TopicId, ErrorCode UNKNOWN_TOPIC_ID, ErrorMessage "x", tags]
    body = "00000000" "02" "00" + topic_id.hex + "0064" "0278" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" "00" + body
    assert codec.decode_response(20, 6, frame[4:], strict=True) == (1, response)


def test_describe_configs_v3_golden_bytes_carry_the_config_type_and_null_documentation():
    request_class = messages.DescribeConfigsRequest
    request = request_class(resources=[request_class.DescribeConfigsResource(
        resource_type=2, resource_name="t", configuration_keys=None)], include_synonyms=False,
        include_documentation=True)
    frame = codec.encode_request(RequestHeader(32, 3, 1, "c"), request)
    body = "00000001" "02" "0001" "74" "ffffffff" "00" "01"  # v3 is not flexible: IncludeDocumentation last
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0020" "0003" "00000001" "0001" "63" + body
    response_class = messages.DescribeConfigsResponse
    response = response_class(throttle_time_ms=0, results=[response_class.DescribeConfigsResult(
        error_code=0, error_message=None, resource_type=2, resource_name="t", configs=[
            response_class.DescribeConfigsResourceResult(name="a", value="1", read_only=False, config_source=5,
                                                         is_sensitive=False, synonyms=[], config_type=5,
                                                         documentation=None)])])
    frame = codec.encode_response(RequestHeader(32, 3, 1, "c"), response)
    config = "0001" "61" "0001" "31" "00" "05" "00" "00000000" "05" "ffff"  # ..., Synonyms [], ConfigType, null
    body = "00000000" "00000001" "0000" "ffff" "02" "0001" "74" "00000001" + config
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" + body
    assert codec.decode_response(32, 3, frame[4:], strict=True) == (1, response)


def test_describe_topic_partitions_v0_golden_bytes_with_a_cursor_and_a_null_next_cursor():  # KIP-966
    request_class = messages.DescribeTopicPartitionsRequest
    request = request_class(topics=[request_class.TopicRequest(name="a")], response_partition_limit=2000,
                            cursor=request_class.Cursor(topic_name="a", partition_index=3))
    frame = codec.encode_request(RequestHeader(75, 0, 1, "c"), request)
    # Topics [Name "a", tags], ResponsePartitionLimit 2000, Cursor present (01) [TopicName "a", PartitionIndex 3,
    # tags], tags
    body = "02" "0261" "00" "000007d0" "01" "0261" "00000003" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "004b" "0000" "00000001" "0001" "63" "00" + body
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(75, 0, 1, "c"), request)
    response_class = messages.DescribeTopicPartitionsResponse
    response = response_class(throttle_time_ms=0, topics=[response_class.DescribeTopicPartitionsResponseTopic(
        error_code=3, name="a", topic_id=uuid_zero(), partitions=[])], next_cursor=None)
    frame = codec.encode_response(RequestHeader(75, 0, 1, "c"), response)
    # Topics [ErrorCode 3, Name "a", TopicId zero, IsInternal false, Partitions [], TopicAuthorizedOperations
    # INT32_MIN, tags], NextCursor null (ff), tags
    body = "00000000" "02" "0003" "0261" + "00" * 16 + "00" "01" "80000000" "00" "ff" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" "00" + body
    assert codec.decode_response(75, 0, frame[4:], strict=True) == (1, response)


def uuid_zero():
    import uuid

    return uuid.UUID(int=0)


def test_describe_quorum_v2_golden_bytes_with_a_voter_and_its_controller_listener():  # KIP-595, KIP-836, KIP-853
    request_class = messages.DescribeQuorumRequest
    request = request_class(topics=[request_class.TopicData(topic_name="m", partitions=[
        request_class.PartitionData(partition_index=0)])])
    frame = codec.encode_request(RequestHeader(55, 2, 1, "c"), request)
    # Topics [TopicName "m", Partitions [PartitionIndex 0, tags], tags], tags (flexible from v0)
    body = "02" "026d" "02" "00000000" "00" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0037" "0002" "00000001" "0001" "63" "00" + body
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(55, 2, 1, "c"), request)
    response_class = messages.DescribeQuorumResponse
    voter = response_class.ReplicaState(replica_id=1, replica_directory_id=uuid_zero(), log_end_offset=5,
                                        last_fetch_timestamp=-1, last_caught_up_timestamp=7)
    response = response_class(error_code=0, error_message=None, topics=[response_class.TopicData(
        topic_name="m", partitions=[response_class.PartitionData(
            partition_index=0, error_code=0, error_message=None, leader_id=1, leader_epoch=2, high_watermark=5,
            current_voters=[voter], observers=[])])], nodes=[response_class.Node(node_id=1, listeners=[
                response_class.Listener(name="C", host="h", port=9093)])])
    frame = codec.encode_response(RequestHeader(55, 2, 1, "c"), response)
    # ErrorCode 0, ErrorMessage null (00), Topics [TopicName "m", Partitions [PartitionIndex 0, ErrorCode 0,
    # ErrorMessage null, LeaderId 1, LeaderEpoch 2, HighWatermark 5, CurrentVoters [ReplicaId 1, ReplicaDirectoryId
    # zero, LogEndOffset 5, LastFetchTimestamp -1, LastCaughtUpTimestamp 7, tags], Observers [], tags], tags],
    # Nodes [NodeId 1, Listeners [Name "C", Host "h", Port 9093 (uint16), tags], tags], tags
    replica = "00000001" + "00" * 16 + "0000000000000005" "ffffffffffffffff" "0000000000000007" "00"
    partition = "00000000" "0000" "00" "00000001" "00000002" "0000000000000005" "02" + replica + "01" "00"
    body = "0000" "00" "02" "026d" "02" + partition + "00" "02" "00000001" "02" "0243" "0268" "2385" "00" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" "00" + body
    assert codec.decode_response(55, 2, frame[4:], strict=True) == (1, response)


def test_alter_replica_log_dirs_v2_golden_bytes():  # flexible from v2
    request_class = messages.AlterReplicaLogDirsRequest
    request = request_class(dirs=[request_class.AlterReplicaLogDir(path="/d", topics=[
        request_class.AlterReplicaLogDirTopic(name="t", partitions=[0, 1])])])
    frame = codec.encode_request(RequestHeader(34, 2, 1, "c"), request)
    # Dirs [Path "/d", Topics [Name "t", Partitions [0, 1], tags], tags], tags
    body = "02" "032f64" "02" "0274" "03" "00000000" "00000001" "00" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0022" "0002" "00000001" "0001" "63" "00" + body
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(34, 2, 1, "c"), request)
    response_class = messages.AlterReplicaLogDirsResponse
    response = response_class(throttle_time_ms=0, results=[response_class.AlterReplicaLogDirTopicResult(
        topic_name="t", partitions=[response_class.AlterReplicaLogDirPartitionResult(partition_index=1, error_code=57)])])
    frame = codec.encode_response(RequestHeader(34, 2, 1, "c"), response)
    # ThrottleTimeMs 0, Results [TopicName "t", Partitions [PartitionIndex 1, ErrorCode 57, tags], tags], tags
    body = "00000000" "02" "0274" "02" "00000001" "0039" "00" "00" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" "00" + body
    assert codec.decode_response(34, 2, frame[4:], strict=True) == (1, response)


def test_list_offsets_v10_golden_bytes_end_with_the_timeout():  # KIP-1075 (Kafka 4.0)
    request_class = messages.ListOffsetsRequest
    request = request_class(replica_id=-1, isolation_level=1, topics=[request_class.ListOffsetsTopic(
        name="t", partitions=[request_class.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                 timestamp=-1)])], timeout_ms=30000)
    frame = codec.encode_request(RequestHeader(2, 10, 1, "c"), request)
    # ReplicaId -1, IsolationLevel 1, Topics [Name "t", Partitions [PartitionIndex 0, CurrentLeaderEpoch -1,
    # Timestamp -1, tags], tags], TimeoutMs 30000, tags
    body = "ffffffff" "01" "02" "0274" "02" "00000000" "ffffffff" "ffffffffffffffff" "00" "00" "00007530" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0002" "000a" "00000001" "0001" "63" "00" + body
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(2, 10, 1, "c"), request)


def test_telemetry_golden_bytes():  # KIP-714: GetTelemetrySubscriptions and PushTelemetry v0, flexible
    instance = uuid_from_int(7)
    request = messages.GetTelemetrySubscriptionsRequest(client_instance_id=instance)
    frame = codec.encode_request(RequestHeader(71, 0, 1, "c"), request)
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0047" "0000" "00000001" "0001" "63" "00" + f"{7:032x}" + "00"
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(71, 0, 1, "c"), request)
    response_class = messages.GetTelemetrySubscriptionsResponse
    response = response_class(throttle_time_ms=0, error_code=0, client_instance_id=instance, subscription_id=-2,
                              accepted_compression_types=[4, 0], push_interval_ms=1000, telemetry_max_bytes=1048576,
                              delta_temporality=False, requested_metrics=["m."])
    frame = codec.encode_response(RequestHeader(71, 0, 1, "c"), response)
    # ThrottleTimeMs, ErrorCode, ClientInstanceId, SubscriptionId -2, AcceptedCompressionTypes [4, 0] (int8),
    # PushIntervalMs 1000, TelemetryMaxBytes 1 MiB, DeltaTemporality false, RequestedMetrics ["m."], tags
    body = ("00000000" "0000" + f"{7:032x}" + "fffffffe" "03" "04" "00" "000003e8" "00100000" "00" "02" "036d2e" "00")
    assert frame.hex() == f"{len(frame) - 4:08x}" + "00000001" "00" + body
    assert codec.decode_response(71, 0, frame[4:], strict=True) == (1, response)
    request = messages.PushTelemetryRequest(client_instance_id=instance, subscription_id=-2, terminating=True,
                                            compression_type=4, metrics=b"\x01\x02")
    frame = codec.encode_request(RequestHeader(72, 0, 1, "c"), request)
    # ClientInstanceId, SubscriptionId, Terminating true, CompressionType 4, Metrics (compact bytes), tags
    body = f"{7:032x}" + "fffffffe" "01" "04" "03" "0102" "00"
    assert frame.hex() == f"{len(frame) - 4:08x}" + "0048" "0000" "00000001" "0001" "63" "00" + body
    assert codec.decode_request(frame[4:], strict=True) == (RequestHeader(72, 0, 1, "c"), request)


def uuid_from_int(value):
    import uuid

    return uuid.UUID(int=value)

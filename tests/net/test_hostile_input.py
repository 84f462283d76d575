"""Hostile bytes on the Kafka listener of a real node: each gets an error code or a closed connection, the
node keeps serving other clients, and no log changes."""

import random
import socket
import struct

import pytest

from cli.local_cluster import LocalCluster
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_response, encode_request
from partitions.errors import ErrorCode
from partitions.records import build_batch
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of, wait_for_quorum

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("hostile")), nodes=1,
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1})
    cluster.start()
    wait_for_quorum(cluster)
    create_topic(cluster, "target", 1, 1)
    eventually(lambda: topic_of(metadata(cluster), "target"))
    yield cluster
    cluster.stop()


def connect(cluster):
    return socket.create_connection(("127.0.0.1", cluster.kafka_ports[1]), timeout=10)


def request(cluster, api_key, version, body, connection=None):
    own = connection is None
    connection = connection or connect(cluster)
    try:
        connection.sendall(encode_request(RequestHeader(api_key, version, 7, "hostile"), body))
        (size,) = struct.unpack(">i", receive_exactly(connection, 4))
        return decode_response(api_key, version, receive_exactly(connection, size))[1]
    finally:
        if own:
            connection.close()


def receive_exactly(connection, size):
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def closed_by_peer(connection):
    connection.settimeout(10)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def log_end_offset(cluster):
    body = messages.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        messages.ListOffsetsRequest.ListOffsetsTopic(name="target", partitions=[
            messages.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    return request(cluster, ApiKey.LIST_OFFSETS, 5, body).topics[0].partitions[0].offset


def produce_body(records, acks=1):
    request_class = messages.ProduceRequest
    return request_class(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        request_class.TopicProduceData(name="target", partition_data=[
            request_class.PartitionProduceData(index=0, records=records)])])


def still_serving(cluster):
    response = request(cluster, ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
        client_software_name="probe", client_software_version="1"))
    return response.error_code == ErrorCode.NONE and response.api_keys


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x05hello",                      # a frame that is not a request header
    b"\x7f\xff\xff\xff" + b"x" * 100,               # a 2 GiB length prefix
    b"\xff\xff\xff\xfe",                             # a negative length
    struct.pack(">ihhi", 10, 999, 0, 1) + b"\x00\x00",  # unknown api key
    struct.pack(">ihhi", 10, ApiKey.PRODUCE, 99, 1) + b"\x00\x00",  # unsupported produce version
] + [random.Random(seed).randbytes(64) for seed in range(8)], ids=[
    "not-a-header", "2GiB-length", "negative-length", "unknown-api-key", "unsupported-version",
] + [f"random-{seed}" for seed in range(8)])
def test_garbage_closes_the_connection_and_changes_nothing(node, payload):
    before = log_end_offset(node)
    connection = connect(node)
    connection.sendall(payload)
    assert closed_by_peer(connection)
    connection.close()
    assert still_serving(node)
    assert log_end_offset(node) == before


def test_a_truncated_frame_then_hangup_changes_nothing(node):
    before = log_end_offset(node)
    frame = encode_request(RequestHeader(ApiKey.PRODUCE, 7, 1, "x"), produce_body(build_batch([(b"k", b"v")])))
    connection = connect(node)
    connection.sendall(frame[: len(frame) // 2])
    connection.close()
    assert still_serving(node)
    assert log_end_offset(node) == before


def test_an_api_versions_request_of_an_unknown_version_gets_error_35_and_our_versions(node):
    connection = connect(node)
    connection.sendall(encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "x"),
                                      messages.ApiVersionsRequest(client_software_name="a", client_software_version="1"))
                       .replace(struct.pack(">hh", ApiKey.API_VERSIONS, 3), struct.pack(">hh", ApiKey.API_VERSIONS, 77), 1))
    (size,) = struct.unpack(">i", receive_exactly(connection, 4))
    _, response = decode_response(ApiKey.API_VERSIONS, 0, receive_exactly(connection, size))
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == ApiKey.PRODUCE for k in response.api_keys)
    connection.close()


def test_bad_crc_and_malformed_records_are_refused_with_an_error_code(node):
    before = log_end_offset(node)
    batch = bytearray(build_batch([(b"k", b"v")] * 3))
    batch[-1] ^= 0xFF  # inside the CRC-covered bytes
    response = request(node, ApiKey.PRODUCE, 7, produce_body(bytes(batch)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    truncated = build_batch([(b"k", b"v")])[:-5]
    response = request(node, ApiKey.PRODUCE, 7, produce_body(truncated))
    assert response.responses[0].partition_responses[0].error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    negative = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", negative, 8, -5)  # negative batch length
    response = request(node, ApiKey.PRODUCE, 7, produce_body(bytes(negative)))
    assert response.responses[0].partition_responses[0].error_code != ErrorCode.NONE
    response = request(node, ApiKey.PRODUCE, 7, produce_body(build_batch([(b"k", b"v")]), acks=5))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert log_end_offset(node) == before
    ok = request(node, ApiKey.PRODUCE, 7, produce_body(build_batch([(b"k", b"v")])))
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert log_end_offset(node) == before + 1


def test_batches_that_break_a_record_rule_get_kafkas_error_and_a_message(node):
    from tests.partitions.test_log_validator import resealed
    from partitions.compression import ZSTD
    from partitions.records import Record

    before = log_end_offset(node)
    miscounted = resealed(build_batch([(b"k", b"v")] * 3), count=4)
    gapped = resealed(build_batch([Record(0, 1, b"k", b"v", ()), Record(3, 1, b"k", b"v", ())], base_timestamp=1), count=2)
    garbage = resealed(build_batch([(b"k", b"v")] * 3, compression=ZSTD), section=b"\x28\xb5\x2f\xfd" + b"junk" * 9)
    for batch, code in ((miscounted, ErrorCode.INVALID_RECORD), (gapped, ErrorCode.INVALID_RECORD),
                        (garbage, ErrorCode.CORRUPT_MESSAGE)):
        answer = request(node, ApiKey.PRODUCE, 8, produce_body(bytes(batch))).responses[0].partition_responses[0]
        assert (answer.error_code, bool(answer.error_message)) == (code, True), answer
    assert log_end_offset(node) == before
    assert still_serving(node)


def test_two_batches_for_one_partition_in_one_request_are_refused(node):  # Kafka: one v2 batch per partition
    before = log_end_offset(node)
    two = build_batch([(b"k", b"v")]) + build_batch([(b"k", b"w")])
    answer = request(node, ApiKey.PRODUCE, 8, produce_body(two)).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.INVALID_RECORD and "one record batch" in answer.error_message
    assert log_end_offset(node) == before

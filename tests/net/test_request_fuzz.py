"""Well-formed requests with hostile values (simulations/fuzz_requests.py) against a real node over real
sockets: every one is answered, or its connection closed, the node keeps serving, logs no handler failure, and
a plain produce and fetch work afterwards."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from cli.local_cluster import LocalCluster
from net.protocol import messages
from net.protocol.codec import ApiKey, RequestHeader, decode_response, encode_request
from partitions.errors import ErrorCode
from partitions.records import build_batch, decode_batches
from simulations.fuzz_requests import RequestFuzzer
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of, wait_for_quorum
from tests.net.test_hostile_input import receive_exactly

pytestmark = pytest.mark.slow

REQUESTS = 2_000
ANSWER_WAIT_S = 2.0  # a long poll or a join may hold its answer: that connection is dropped and another opened


def _call(connection: socket.socket, api_key: int, version: int, request, correlation_id: int):
    connection.sendall(encode_request(RequestHeader(api_key, version, correlation_id, "fuzz"), request))
    (size,) = struct.unpack(">i", receive_exactly(connection, 4))
    answered_id, response = decode_response(api_key, version, receive_exactly(connection, size))
    assert answered_id == correlation_id
    return response


def test_hostile_well_formed_requests_leave_a_real_node_serving(tmp_path):
    cluster = LocalCluster(str(tmp_path), nodes=1, log_level="info",
                           topic_defaults={"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1})
    cluster.start()
    try:
        wait_for_quorum(cluster)
        address = ("127.0.0.1", cluster.kafka_ports[1])
        # Seed 3 draws, among others, an acks=all Produce naming a partition twice: the code before that fix
        # logged request_failed here (its handler raised, the connection closed).
        fuzzer = RequestFuzzer(random.Random(3))
        with socket.create_connection(address, timeout=10) as connection:
            versions = _call(connection, ApiKey.API_VERSIONS, 3, messages.ApiVersionsRequest(
                client_software_name="fuzz", client_software_version="1"), 0)
        fuzzer.serve({api.api_key: (api.min_version, api.max_version) for api in versions.api_keys})
        answered = dropped = 0
        connection = None
        for correlation_id in range(1, REQUESTS + 1):
            api_key, version, request = fuzzer.request()
            if api_key == ApiKey.PRODUCE and request.acks == 0:
                request.acks = 1
            connection = connection or socket.create_connection(address, timeout=ANSWER_WAIT_S)
            try:
                fuzzer.learn(_call(connection, api_key, version, request, correlation_id), request)
                answered += 1
            except (ConnectionError, socket.timeout):
                connection.close()
                connection = None
                dropped += 1
            assert cluster.is_running(1), f"the node died at request {correlation_id} (api {api_key} v{version})"
        if connection is not None:
            connection.close()
        assert answered >= REQUESTS * 0.95, (answered, dropped)

        create_topic(cluster, "after", 1, 1)
        eventually(lambda: topic_of(metadata(cluster), "after"))
        produce = messages.ProduceRequest
        fetch = messages.FetchRequest
        with socket.create_connection(address, timeout=10) as connection:
            produced = _call(connection, ApiKey.PRODUCE, 9, produce(acks=-1, timeout_ms=5_000, topic_data=[
                produce.TopicProduceData(name="after", partition_data=[produce.PartitionProduceData(
                    index=0, records=build_batch([(None, b"still serving")], base_timestamp=1_700_000_000_000))])]),
                REQUESTS + 1)
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            fetched = _call(connection, ApiKey.FETCH, 11, fetch(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                topics=[fetch.FetchTopic(topic="after", partitions=[fetch.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), REQUESTS + 2)
        records = bytes(fetched.responses[0].partitions[0].records)
        assert [r.value for b in decode_batches(records) for r in b.records] == [b"still serving"]
    finally:
        cluster.stop()
    log = open(cluster.log_path(1), encoding="utf-8").read()
    assert "request_failed" not in log and "Traceback" not in log

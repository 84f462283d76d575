"""The internal topics (`__consumer_offsets`, `__transaction_state`) on a real three-node cluster are created
with the configured replication factor, never with whatever brokers happen to be up at the first coordinator
lookup: while a broker of the three is down, FindCoordinator answers COORDINATOR_NOT_AVAILABLE and creates
nothing; once it is back the topics are created with three replicas per partition."""

from __future__ import annotations

import time

import pytest

from cli.local_cluster import LocalCluster
from net.client.sync import SyncKafkaClient
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, eventually, metadata, topic_of, wait_for_quorum

pytestmark = [pytest.mark.slow]
KEYS = {0: ("__consumer_offsets", "a-group"), 1: ("__transaction_state", "a-transactional-id")}


def find_coordinator(client: SyncKafkaClient, key_type: int) -> int:
    response = client.send(None, ApiKey.FIND_COORDINATOR, messages.FindCoordinatorRequest(
        key=KEYS[key_type][1], key_type=key_type), api_version=2)
    return response.error_code


def test_internal_topics_wait_for_the_configured_brokers(tmp_path):
    cluster = LocalCluster(str(tmp_path), nodes=3, broker={
        **FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 3, "transaction_state_log_num_partitions": 3})
    cluster.start()
    try:
        wait_for_quorum(cluster)
        cluster.kill(3)
        eventually(lambda: {b["id"]: b["status"] for b in metadata(cluster, 1, 2)["brokers"]}.get(3) != "active",
                   what="broker 3 fenced")
        with SyncKafkaClient(",".join(cluster.bootstrap_of(n) for n in (1, 2))) as client:
            deadline = time.monotonic() + 4  # well past a controller round trip: a creation would have landed
            while time.monotonic() < deadline:
                for key_type in KEYS:
                    assert find_coordinator(client, key_type) == ErrorCode.COORDINATOR_NOT_AVAILABLE
                time.sleep(0.2)
            document = metadata(cluster, 1, 2)
            assert all(topic_of(document, name) is None for name, _ in KEYS.values()), document["topics"]

            cluster.start_node(3)
            for key_type in KEYS:
                eventually(lambda: find_coordinator(client, key_type) == ErrorCode.NONE,
                           what=f"a coordinator for key type {key_type}")
        document = metadata(cluster)
        for name, _ in KEYS.values():
            partitions = topic_of(document, name)["partitions"]
            assert len(partitions) == 3
            assert all(sorted(p["replicas"]) == [1, 2, 3] for p in partitions), partitions
    finally:
        cluster.stop()

"""A cluster whose metadata quorum runs on a controller-only node (roles = ["controller"], as KRaft's dedicated
controllers): the real clients' admin calls find a controller among the brokers. A controller-only node has no
Kafka listener, so Metadata and DescribeCluster name a broker as the controller there (Kafka's KRaft brokers
name a live broker, which forwards the request); naming the quorum leader left librdkafka "waiting for
controller" until its timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cli.local_cluster import free_ports
from tests.net.cluster_helpers import eventually

pytestmark = [pytest.mark.slow, pytest.mark.external]


@pytest.fixture
def dedicated(tmp_path):
    """Node 1 controller-only (no Kafka listener), node 2 broker-only, started with `flotilla up --config`;
    yields the broker's bootstrap address."""
    controller_1, kafka_2 = free_ports(2)
    (tmp_path / "cluster.toml").write_text(f"""cluster_id = "dedicated"
[[nodes]]
id = 1
controller_port = {controller_1}
roles = ["controller"]
data_dir = "node-1"
[[nodes]]
id = 2
kafka_port = {kafka_2}
roles = ["broker"]
data_dir = "node-2"
[topic_defaults]
partitions = 1
replication_factor = 1
min_insync_replicas = 1
[broker]
offsets_topic_replication_factor = 1
transaction_state_log_replication_factor = 1
transaction_state_log_min_isr = 1
group_initial_rebalance_delay_ms = 0
""")
    up = subprocess.Popen([sys.executable, "-m", "cli.main", "up", "--config", "cluster.toml"], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield f"127.0.0.1:{kafka_2}"
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(60)


def test_admin_clients_find_a_controller_among_the_brokers(dedicated):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as KafkaPythonNewTopic

    admin = AdminClient({"bootstrap.servers": dedicated})

    def led():
        try:
            metadata = admin.list_topics(timeout=5)
        except KafkaException:  # the broker is not listening yet
            return None
        return metadata if metadata.controller_id >= 0 else None

    described = eventually(led, 60, what="a quorum leader named")
    assert (described.controller_id, list(described.brokers)) == (2, [2])  # the broker, not controller-only 1
    assert admin.describe_cluster().result(30).controller.id == 2
    started = time.monotonic()
    assert admin.create_topics([NewTopic("by-librdkafka", 2, 1)], operation_timeout=20)["by-librdkafka"] \
        .result(30) is None
    assert time.monotonic() - started < 10  # not after librdkafka's wait for a controller timed out
    kafka_python = KafkaAdminClient(bootstrap_servers=dedicated)
    try:
        created = kafka_python.create_topics([KafkaPythonNewTopic("by-kafka-python", 1, 1)])
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [("by-kafka-python", 0)]
    finally:
        kafka_python.close()

    producer = Producer({"bootstrap.servers": dedicated})
    producer.produce("by-librdkafka", value=b"through the broker", partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": dedicated, "group.id": "dedicated"})
    consumer.assign([TopicPartition("by-librdkafka", 1, 0)])
    message = eventually(lambda: consumer.poll(1), 30, what="the record read back")
    consumer.close()
    assert message.value() == b"through the broker"

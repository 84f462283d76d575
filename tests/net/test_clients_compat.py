"""Real Kafka clients against a real three-node cluster: kcat (librdkafka 2.0), confluent-kafka and
kafka-python, unchanged."""

import collections
import json
import shutil
import subprocess

import pytest

from cli.local_cluster import LocalCluster
from partitions.murmur2 import default_partition
from tests.net.cluster_helpers import (
    cli,
    cli_json,
    create_topic,
    eventually,
    metadata,
    poll_records,
    topic_of,
    wait_for_quorum,
)

pytestmark = [pytest.mark.slow, pytest.mark.external]
MESSAGES = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("compat")), nodes=3)
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def kcat(*args, input_text=None, timeout=90):
    assert shutil.which("kcat"), "kcat is required (apt-get install kcat)"
    return subprocess.run(["kcat", *args], input=input_text, capture_output=True, text=True, timeout=timeout)


def test_kcat_lists_brokers_topics_leaders_and_isr(cluster):
    create_topic(cluster, "listed", 3, 3)
    eventually(lambda: topic_of(metadata(cluster), "listed"))
    result = kcat("-b", cluster.bootstrap_servers, "-L", "-J")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert sorted(b["id"] for b in listing["brokers"]) == [1, 2, 3]
    topic = next(t for t in listing["topics"] if t["topic"] == "listed")
    assert len(topic["partitions"]) == 3
    for partition in topic["partitions"]:
        assert partition["leader"] in (1, 2, 3)
        assert sorted(r["id"] for r in partition["replicas"]) == [1, 2, 3]
        assert sorted(r["id"] for r in partition["isrs"]) == [1, 2, 3]


def test_kcat_keyed_messages_round_trip_in_order_on_javas_murmur2_partitions(cluster):
    create_topic(cluster, "keyed", 3, 3, min_insync_replicas="2")
    eventually(lambda: topic_of(metadata(cluster), "keyed"))
    lines = [f"key-{i % 97}:value-{i}" for i in range(MESSAGES)]
    produced = kcat("-b", cluster.bootstrap_servers, "-P", "-t", "keyed", "-K:", "-X", "topic.partitioner=murmur2_random",
                    "-X", "acks=all", input_text="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat("-b", cluster.bootstrap_servers, "-C", "-t", "keyed", "-e", "-o", "beginning", "-f", "%p\t%o\t%k\t%s\n")
    assert consumed.returncode == 0, consumed.stderr
    by_partition = collections.defaultdict(list)
    for line in consumed.stdout.splitlines():
        partition, offset, key, value = line.split("\t")
        by_partition[int(partition)].append((int(offset), key, value))
    assert sum(len(v) for v in by_partition.values()) == MESSAGES
    for partition, rows in by_partition.items():
        assert [offset for offset, _, _ in rows] == list(range(len(rows)))  # dense offsets, in order
        values = [int(value.split("-")[1]) for _, _, value in rows]
        assert values == sorted(values)  # kcat sends in input order: per-partition order is kept
        for _, key, _ in rows:
            assert default_partition(key.encode(), 3) == partition  # Java's murmur2 placement


def test_confluent_kafka_producer_acks_all_zstd_and_consumer_assign_seek(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(cluster, "confluent", 3, 3, min_insync_replicas="2")
    eventually(lambda: topic_of(metadata(cluster), "confluent"))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "compression.type": "zstd",
                         "linger.ms": 5, "partitioner": "murmur2_random"})
    acknowledged = {}

    def on_delivery(error, message):
        assert error is None, error
        acknowledged[message.value()] = (message.partition(), message.offset())

    for i in range(MESSAGES):
        producer.produce("confluent", key=f"k{i % 13}".encode(), value=f"v{i}".encode(), on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acknowledged) == MESSAGES
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "compat",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("confluent", p, 0) for p in range(3)])
    seek_partition, seek_offset = acknowledged[b"v5000"]
    consumer.seek(TopicPartition("confluent", seek_partition, seek_offset))
    expected = {v: po for v, po in acknowledged.items() if po[0] != seek_partition or po[1] >= seek_offset}
    received = {}
    deadline_polls = 200
    while len(received) < len(expected) and deadline_polls:
        deadline_polls -= 1
        for message in consumer.consume(1000, 0.5):
            assert message.error() is None, message.error()
            received[message.value()] = (message.partition(), message.offset())
    consumer.close()
    assert received == expected


def test_kafka_python_producer_and_consumer_assign_seek(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(cluster, "kafka-python", 2, 3)
    eventually(lambda: topic_of(metadata(cluster), "kafka-python"))
    # kafka-python 3 producers are idempotent by default: InitProducerId and sequence checks (KIP-98).
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", compression_type="gzip")
    futures = [producer.send("kafka-python", key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(2000)]
    producer.flush(60)
    metadata_by_value = {f"v{i}".encode(): f.get(timeout=30) for i, f in enumerate(futures)}
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False)
    partitions = [TopicPartition("kafka-python", p) for p in range(2)]
    consumer.assign(partitions)
    consumer.seek(partitions[0], 10)
    consumer.seek(partitions[1], 0)
    expected = {
        value: (md.partition, md.offset) for value, md in metadata_by_value.items()
        if md.partition == 1 or md.offset >= 10
    }
    received = {m.value: (m.partition, m.offset) for m in poll_records(consumer, len(expected))}
    consumer.close()
    assert received == expected


def test_producers_auto_create_a_topic_with_the_cluster_defaults(cluster):
    """librdkafka and kafka-python name a topic nobody created: the broker asks the controller for it (Kafka's
    auto.create.topics.enable), the first answers are LEADER_NOT_AVAILABLE, and the records land in a topic of
    the cluster's default shape (3 partitions, replication 3)."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    delivered = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    producer.produce("auto-librdkafka", value=b"first", on_delivery=lambda error, message: delivered.append(error))
    assert producer.flush(30) == 0 and delivered == [None]
    kafka_python = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=30000)
    assert kafka_python.send("auto-kafka-python", value=b"first").get(timeout=30).offset == 0
    kafka_python.close()
    for name in ("auto-librdkafka", "auto-kafka-python"):
        partitions = topic_of(metadata(cluster), name)["partitions"]
        assert [(p["partition"], len(p["replicas"])) for p in partitions] == [(0, 3), (1, 3), (2, 3)]


def test_kafka_python_describes_each_broker_s_log_dir_with_its_replicas_sizes_and_volume(cluster):
    """DescribeLogDirs (v4 with kafka-python 3): each broker answers its one log directory by absolute path, the
    size and usable bytes of its volume, and every replica it holds with the bytes of its segment files on disk;
    asked for one partition, only that one; no ACLs here, so no authorization error."""
    import os

    from kafka import KafkaAdminClient, KafkaProducer

    create_topic(cluster, "log-dirs", 2, 3)
    eventually(lambda: topic_of(metadata(cluster), "log-dirs"))
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for index in range(300):
        producer.send("log-dirs", value=b"x" * 100, partition=index % 2)
    producer.flush(60)
    producer.close()

    def on_disk(node_id: int, partition: int) -> int:
        directory = os.path.join(cluster.directory, f"node-{node_id}", "logs", f"log-dirs-{partition}")
        return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
                   if name.endswith(".log"))

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        def sizes() -> dict | None:
            found = {}
            for answer in admin.describe_log_dirs():
                (log_dir,) = answer["log_dirs"]
                assert log_dir["error_code"] == 0 and 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
                assert log_dir["log_dir"] == os.path.join(cluster.directory, f"node-{answer['broker']}", "logs")
                for topic in log_dir["topics"]:
                    for row in topic["partitions"]:
                        assert row["offset_lag"] == 0 and row["is_future_key"] is False
                        if topic["name"] == "log-dirs":
                            found[(answer["broker"], row["partition_index"])] = row["partition_size"]
            replicated = len(found) == 6 and len({found[(b, 0)] for b in (1, 2, 3)}) == 1 \
                and len({found[(b, 1)] for b in (1, 2, 3)}) == 1
            return found if replicated else None

        found = eventually(sizes, 30, what="every replica of log-dirs at the same size")
        assert all(size == on_disk(broker, partition) > 30_000 / 2 for (broker, partition), size in found.items())
        (one,) = admin.describe_log_dirs({"log-dirs": [1]}, brokers=[1])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in one["log_dirs"][0]["topics"]] \
            == [("log-dirs", [1])]
    finally:
        admin.close()
    # The same through `flotilla brokers log-dirs` (the console script), as a table and as JSON.
    document = cli_json("brokers", "log-dirs", "--topic", "log-dirs", "-b", cluster.bootstrap_servers)
    assert [(d["broker"], d["error"], d["total_bytes"] > 0) for d in document] == [(b, None, True) for b in (1, 2, 3)]
    assert {(d["broker"], r["partition"]): r["size_bytes"] for d in document for r in d["replicas"]} == found
    table = cli("brokers", "log-dirs", "--topic", "log-dirs", "-b", cluster.bootstrap_servers)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split() == [
        "BROKER", "LOG_DIR", "TOTAL_BYTES", "USABLE_BYTES", "REPLICAS", "SIZE_BYTES", "ERROR"]
    assert ["1", "log-dirs", "0", str(found[(1, 0)]), "0"] in [line.split() for line in table.stdout.splitlines()]
    missing = cli("brokers", "log-dirs", "--topic", "nope", "-b", cluster.bootstrap_servers)
    assert missing.returncode == 1 and missing.stderr == "flotilla: topic 'nope' does not exist\n"


def test_describe_cluster_endpoint_types_and_fenced_brokers(cluster):
    """DescribeCluster v1-v2 (KIP-919, KIP-1073): kafka-python's admin client, which reads the endpoint type of
    the answer, describes the cluster; asking a broker for controllers answers MISMATCHED_ENDPOINT_TYPE, an
    unknown type UNSUPPORTED_ENDPOINT_TYPE; a killed broker, once fenced, is listed only when fenced brokers
    are asked for, with IsFenced. (Last in this module: it kills and restarts node 3.)"""
    import trio
    from kafka import KafkaAdminClient

    from net.client.aio import KafkaClient
    from net.protocol import messages
    from net.protocol.codec import ApiKey
    from partitions.errors import ErrorCode

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert [(b["broker_id"], b["is_fenced"]) for b in described["brokers"]] == [(1, False), (2, False), (3, False)]
    assert described["cluster_id"] and described["controller_id"] in (1, 2, 3)

    async def describe(endpoint_type: int, include_fenced: bool = False, version: int = 2):
        async with KafkaClient(cluster.bootstrap_servers, "describe-cluster") as client:
            return await client.send(None, ApiKey.DESCRIBE_CLUSTER, messages.DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=endpoint_type,
                include_fenced_brokers=include_fenced), api_version=version)

    assert trio.run(describe, 2).error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    assert trio.run(describe, 7).error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    both = trio.run(describe, 1, True)
    assert both.endpoint_type == 1 and [(b.broker_id, b.is_fenced) for b in both.brokers] == [
        (1, False), (2, False), (3, False)]

    cluster.kill(3)
    try:
        def fenced() -> bool:
            brokers = [(b.broker_id, b.is_fenced) for b in trio.run(describe, 1, True).brokers]
            return brokers == [(1, False), (2, False), (3, True)]

        eventually(fenced, 60, what="node 3 fenced")
        assert [b.broker_id for b in trio.run(describe, 1, False).brokers] == [1, 2]
    finally:
        cluster.start_node(3)

"""Kafka's LogValidator rules seen by real clients: a keyless record sent to a compacted topic is refused with
INVALID_RECORD (KIP-467), nothing of its batch is appended, and a keyed record of the same flush to another
partition succeeds."""

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(str(tmp_path_factory.mktemp("validator")), nodes=1,
                      topic_defaults={"partitions": 2, "replication_factor": 1, "min_insync_replicas": 1}) as cluster:
        wait_for_quorum(cluster)
        yield cluster


def compacted_topic(cluster, name):
    create_topic(cluster, name, 2, 1, **{"cleanup.policy": "compact"})
    eventually(lambda: topic_of(metadata(cluster), name))


def end_offsets(cluster, topic):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "offsets"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    finally:
        consumer.close()


def test_confluent_kafka_gets_invalid_record_for_a_keyless_record_to_a_compacted_topic(cluster):
    from confluent_kafka import KafkaError, Producer

    compacted_topic(cluster, "compacted-confluent")
    reports = {}
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0})
    producer.produce("compacted-confluent", value=b"no key", partition=0,
                     on_delivery=lambda error, message: reports.__setitem__("keyless", error))
    producer.produce("compacted-confluent", value=b"keyed", key=b"k", partition=1,
                     on_delivery=lambda error, message: reports.__setitem__("keyed", error))
    producer.flush(30)
    assert reports["keyless"] is not None and reports["keyless"].code() == KafkaError.INVALID_RECORD, reports
    assert reports["keyed"] is None
    assert end_offsets(cluster, "compacted-confluent") == [0, 1]


def test_kafka_python_gets_invalid_record_for_a_keyless_record_to_a_compacted_topic(cluster):
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    compacted_topic(cluster, "compacted-kafka-python")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, retries=0)
    keyless = producer.send("compacted-kafka-python", value=b"no key", partition=0)
    keyed = producer.send("compacted-kafka-python", value=b"keyed", key=b"k", partition=1)
    producer.flush(30)
    with pytest.raises(InvalidRecordError):
        keyless.get(timeout=30)
    assert keyed.get(timeout=30).offset == 0
    producer.close()
    assert end_offsets(cluster, "compacted-kafka-python") == [0, 1]

"""Real admin clients at Kafka 3.9's admin versions on a real node: kafka-python 3 (CreateTopics v7, DeleteTopics
v6, CreatePartitions v3, DeleteRecords v2, DescribeConfigs v4, AlterConfigs v2, IncrementalAlterConfigs v1, its
highest) and confluent-kafka's AdminClient (librdkafka 2.16's highest: DeleteTopics v4, CreatePartitions v2 and
DeleteRecords v2 among them, flexible versions new here), unchanged."""

import uuid

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, eventually, metadata, topic_of, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("admin")), nodes=1, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def test_kafka_python_administers_topics_at_its_highest_versions(cluster):
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.protocol.admin import (AlterConfigsRequest, CreatePartitionsRequest, CreateTopicsRequest,
                                      DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
                                      IncrementalAlterConfigsRequest)

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        versions = admin._manager.broker_version_data
        assert [versions.api_version(r) for r in (
            CreateTopicsRequest, DeleteTopicsRequest, CreatePartitionsRequest, DeleteRecordsRequest,
            DescribeConfigsRequest, AlterConfigsRequest, IncrementalAlterConfigsRequest)] == [7, 6, 3, 2, 4, 2, 1]

        created = admin.create_topics({"kp-admin": {"num_partitions": 2, "replication_factor": 1,
                                                    "configs": {"retention.ms": "3600000"}}})
        (topic,) = created["topics"]
        assert (topic["name"], topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == \
            ("kp-admin", 0, 2, 1)
        assert topic["configs"]["retention.ms"] == {"value": "3600000", "read_only": False,
                                                    "config_source": "DYNAMIC_TOPIC_CONFIG", "is_sensitive": False}
        assert topic["configs"]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        listed = eventually(lambda: topic_of(metadata(cluster), "kp-admin"), what="the topic")
        assert uuid.UUID(topic["topic_id"]).hex == listed["topic_id"]

        resource = ConfigResource(ConfigResourceType.TOPIC, "kp-admin", {"segment.ms": "600000"})
        admin.alter_configs([resource], incremental=True)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        configs = described["topic"]["kp-admin"]  # the configs that are not defaults
        assert {name: (c["value"], c["config_type"], c["documentation"]) for name, c in configs.items()} == {
            "retention.ms": ("3600000", "LONG", None), "segment.ms": ("600000", "LONG", None)}

        admin.create_partitions({"kp-admin": 3})
        eventually(lambda: len(topic_of(metadata(cluster), "kp-admin")["partitions"]) == 3, what="3 partitions")

        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
        for value in range(5):
            producer.send("kp-admin", value=b"%d" % value, partition=0)
        producer.flush()
        producer.close()
        admin.delete_records({TopicPartition("kp-admin", 0): 3})

        deleted = admin.delete_topics([uuid.UUID(topic["topic_id"])])  # v6: by id
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("kp-admin", 0)]
        eventually(lambda: topic_of(metadata(cluster), "kp-admin") is None, what="the topic gone")
    finally:
        admin.close()


def test_confluent_kafka_administers_topics_at_librdkafkas_versions(cluster):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic, ResourceType)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    created = admin.create_topics([NewTopic("ck-admin", 2, 1, config={"retention.ms": "3600000"})],
                                  operation_timeout=20)
    assert created["ck-admin"].result(30) is None
    eventually(lambda: topic_of(metadata(cluster), "ck-admin"), what="the topic")

    resource = ConfigResource(ResourceType.TOPIC, "ck-admin", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "ck-admin")])
    configs = next(iter(described.values())).result(30)
    assert configs["retention.ms"].value == "3600000" and configs["segment.ms"].value == "600000"

    assert admin.create_partitions([NewPartitions("ck-admin", 3)], operation_timeout=20)["ck-admin"].result(30) is None
    eventually(lambda: len(topic_of(metadata(cluster), "ck-admin")["partitions"]) == 3, what="3 partitions")

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for value in range(5):
        producer.produce("ck-admin", value=b"%d" % value, partition=0)
    assert producer.flush(30) == 0
    deleted = admin.delete_records([TopicPartition("ck-admin", 0, 3)])
    assert next(iter(deleted.values())).result(30).low_watermark == 3

    assert admin.delete_topics(["ck-admin"], operation_timeout=20)["ck-admin"].result(30) is None
    eventually(lambda: topic_of(metadata(cluster), "ck-admin") is None, what="the topic gone")

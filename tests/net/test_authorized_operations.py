"""KIP-430 authorized operations with confluent-kafka's AdminClient: with no authorizer, every operation that
applies to a topic, the cluster or a group is listed (what Kafka answers); absent when not asked for."""

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_describe_topics_cluster_and_groups_list_the_authorized_operations(tmp_path):
    from confluent_kafka import Consumer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AclOperation, AdminClient

    with LocalCluster(str(tmp_path), nodes=1, topic_defaults={"partitions": 1, "replication_factor": 1,
                                                               "min_insync_replicas": 1}) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "described", 1, 1)
        eventually(lambda: topic_of(metadata(cluster), "described"))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        topic = admin.describe_topics(TopicCollection(["described"]), include_authorized_operations=True)
        assert set(topic["described"].result(30).authorized_operations) == {
            AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
            AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
        assert admin.describe_topics(TopicCollection(["described"]))["described"].result(30).authorized_operations is None
        cluster_ops = admin.describe_cluster(include_authorized_operations=True).result(30).authorized_operations
        assert set(cluster_ops) == {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                                    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "described-group",
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("described", 0, 0)], asynchronous=False)
        consumer.close()
        group = admin.describe_consumer_groups(["described-group"], include_authorized_operations=True)
        assert set(group["described-group"].result(30).authorized_operations) == {
            AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}


def test_list_offsets_max_timestamp_earliest_local_and_latest_tiered(tmp_path):  # KIP-734, KIP-405, KIP-1005
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    with LocalCluster(str(tmp_path), nodes=1, topic_defaults={"partitions": 1, "replication_factor": 1,
                                                               "min_insync_replicas": 1}) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "stamps", 1, 1)
        eventually(lambda: topic_of(metadata(cluster), "stamps"))
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
        now_ms = 1_795_000_000_000
        for index, offset_ms in enumerate([5_000, 9_000, 1_000, 9_000, 2_000]):  # out of order, a tie
            producer.produce("stamps", value=b"v%d" % index, partition=0, timestamp=now_ms + offset_ms)
            producer.flush(30)  # one batch per record, so the answer is a record, not a batch
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        partition = TopicPartition("stamps", 0)

        def listed(spec):
            return admin.list_offsets({partition: spec})[partition].result(30)

        biggest = listed(OffsetSpec.max_timestamp())
        assert (biggest.offset, biggest.timestamp) == (1, now_ms + 9_000)  # the first of the tie
        assert listed(OffsetSpec.earliest()).offset == 0
        assert listed(OffsetSpec.latest()).offset == 5

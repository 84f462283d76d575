"""A real node stamps LogAppendTime with the wall clock (milliseconds since the epoch, as Kafka does), so that
record timestamps, time-based retention and offset commit timestamps mean what clients and operators expect;
Raft keeps its monotonic clock."""

import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import create_topic, eventually, metadata, topic_of, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_log_append_time_is_the_wall_clock(tmp_path):
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

    with LocalCluster(str(tmp_path), nodes=1, topic_defaults={"partitions": 1, "replication_factor": 1,
                                                               "min_insync_replicas": 1}) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "stamped", 1, 1, **{"message.timestamp.type": "LogAppendTime"})
        eventually(lambda: topic_of(metadata(cluster), "stamped"))
        before_ms = int(time.time() * 1000)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce("stamped", value=b"x", timestamp=1_000)  # the broker overrides a CreateTime of 1970
        assert producer.flush(30) == 0
        after_ms = int(time.time() * 1000)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "clock"})
        consumer.assign([TopicPartition("stamped", 0, 0)])
        message = eventually(lambda: consumer.poll(1.0), 30, what="the record")
        consumer.close()
        kind, stamp = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before_ms - 1_000 <= stamp <= after_ms + 1_000, (before_ms, stamp, after_ms)

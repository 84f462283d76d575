"""Leader failover with a real client loses no acknowledged write (acks=all, RF=3, min.insync.replicas=2).

A confluent-kafka producer writes numbered messages while the leader of one partition is SIGKILLed midway.
Afterwards every acknowledged message is readable, in acknowledged order per partition (duplicates from
retries allowed: the producer is not idempotent), and once the cluster is stopped the replicas' logs are
identical up to the high watermark, batch for batch."""

import collections
import os
import signal
import time

import pytest

from net.filestorage import FileStorage
from cli.local_cluster import LocalCluster
from partitions.batch import iter_batches
from partitions.log import PartitionLog
from partitions.log_config import LogConfig
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, NumberedDeliveries, create_topic, eventually, metadata,
                                      topic_of, wait_for_quorum)

pytestmark = [pytest.mark.slow, pytest.mark.external]
MESSAGES = 50_000
TOPIC = "numbered"


def test_acknowledged_writes_survive_the_leader_being_killed(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    try:
        wait_for_quorum(cluster)
        create_topic(cluster, TOPIC, 3, 3, min_insync_replicas="2")
        before = eventually(lambda: topic_of(metadata(cluster), TOPIC))
        victim = before["partitions"][0]["leader"]
        producer = Producer({
            "bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 2,
            "message.send.max.retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 120_000,
            "enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
        })
        on_delivery = NumberedDeliveries()
        acknowledged, failures = on_delivery.acknowledged, on_delivery.failures

        started = time.monotonic()
        for number in range(MESSAGES):
            producer.produce(TOPIC, value=str(number).encode(), partition=number % 3, on_delivery=on_delivery)
            if number == MESSAGES // 2:
                # Midway, with requests in flight: some of them acknowledged, some not yet.
                in_flight = len(producer)
                cluster.kill(victim, signal.SIGKILL)
            producer.poll(0)
        assert producer.flush(150) == 0
        assert not cluster.is_running(victim)
        assert in_flight > 0, "the kill should happen with messages still in flight"
        assert sum(len(v) for v in acknowledged.values()) + len(failures) >= MESSAGES
        acked_total = sum(len(set(v)) for v in acknowledged.values())
        assert acked_total >= MESSAGES * 0.9, (acked_total, failures[:3], time.monotonic() - started)

        survivors = [n for n in (1, 2, 3) if n != victim]
        consumer = Consumer({"bootstrap.servers": ",".join(cluster.bootstrap_of(n) for n in survivors),
                             "group.id": "verify", "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        read = collections.defaultdict(list)
        wanted = {p: set(v) for p, v in acknowledged.items()}
        polls = 600
        while polls and any(not wanted[p] <= set(read[p]) for p in wanted):
            polls -= 1
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    read[message.partition()].append(int(message.value()))
        consumer.close()
        for partition, numbers in acknowledged.items():
            assert set(numbers) <= set(read[partition]), f"partition {partition} lost acknowledged messages"
            first_seen = list(dict.fromkeys(read[partition]))
            acked_order = list(dict.fromkeys(numbers))
            positions = {n: i for i, n in enumerate(first_seen)}
            assert [positions[n] for n in acked_order] == sorted(positions[n] for n in acked_order), (
                f"partition {partition}: acknowledged order not kept")

        cluster.start_node(victim)
        wait_for_quorum(cluster)
        eventually(lambda: all(len(p["isr"]) == 3 for p in topic_of(metadata(cluster), TOPIC)["partitions"]), 60)
    finally:
        cluster.stop()
    assert_replicas_identical_up_to_high_watermark(cluster)


def assert_replicas_identical_up_to_high_watermark(cluster, topic: str = TOPIC,
                                                   hosts: dict[int, list[int]] | None = None, partitions: int = 3):
    """Every replica of partitions 0 to `partitions` - 1 (on all three nodes, or `hosts[partition]`) holds the
    same batches below the lowest checkpointed high watermark."""
    for partition in range(partitions):
        logs = {}
        high_watermarks = []
        for node_id in (hosts or {}).get(partition, (1, 2, 3)):
            root = os.path.join(cluster.directory, f"node-{node_id}")
            storage = FileStorage(root)
            log = PartitionLog.open(storage, f"logs/{topic}-{partition}", LogConfig(), 0)
            logs[node_id] = log
            checkpoint = open(os.path.join(root, "replication-offset-checkpoint")).read().split("\n")[2:]
            for line in checkpoint:
                if line.startswith(f"{topic} {partition} "):
                    high_watermarks.append(int(line.split()[2]))
        high_watermark = min(high_watermarks)
        assert high_watermark > 0
        contents = {node_id: _batches_below(log, high_watermark) for node_id, log in logs.items()}
        for log in logs.values():
            log.close()
        reference = next(iter(contents.values()))
        for node_id, batches in contents.items():
            assert batches == reference, f"{topic}-{partition}: node {node_id} differs below HW {high_watermark}"


def _batches_below(log, high_watermark):
    data = log.read(log.log_start_offset, 1 << 30, high_watermark).records
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc) for _, h in iter_batches(data)
            if h.last_offset < high_watermark]

"""Compacted topics on a real node, read by a real client: the log cleaner keeps the last value of every key and
drops deleted keys after delete.retention.ms, as a confluent-kafka consumer reading from offset 0 sees; and a
segment it cannot read (a flipped byte on the disk) stops the cleaning of that partition alone, with an error
in the node's log and on its metrics endpoint, where it used to take the node down (the pass raised out of the
broker's periodic work; a flipped offset, outside the batch CRC, failed an assertion). On three nodes, a tombstone
outlives its horizon while a follower is down, and goes once the follower is back in the ISR. And
max.compaction.lag.ms (KIP-354) gets overwritten values cleaned that min.cleanable.dirty.ratio would leave."""

from __future__ import annotations

import glob
import os
import time
import urllib.request

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (
    FAST_BROKER_SETTINGS,
    cli,
    cli_json,
    create_topic,
    eventually,
    metadata,
    topic_of,
    wait_for_quorum,
)

pytestmark = [pytest.mark.slow, pytest.mark.external]
TOPIC = "state"
KEYS = 20
RECORDS = 3_000
DELETED = (b"k3", b"k7")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("compaction")), nodes=1, metrics=True,
                           broker={**FAST_BROKER_SETTINGS, "log_retention_check_interval_ms": 500})
    cluster.start()
    wait_for_quorum(cluster)
    create_topic(cluster, TOPIC, 2, 1, **{"cleanup.policy": "compact", "segment.bytes": "8192",
                                          "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"})
    yield cluster
    cluster.stop()


def produce(cluster: LocalCluster, records: list[tuple[int, bytes, bytes | None]], topic: str = TOPIC) -> None:
    from confluent_kafka import Producer

    failed = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5, "batch.size": 2048,
                         "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition,
                         on_delivery=lambda error, _: error is not None and failed.append(error))
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed[:3]


def read_from_start(cluster: LocalCluster, partition: int,
                    topic: str = TOPIC) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record a consumer reads from offset 0 to the high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "reader", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        records, deadline = [], time.monotonic() + 30
        while (not records or records[-1][0] < high - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                records.append((message.offset(), message.key(), message.value()))
        assert records and records[-1][0] == high - 1, (len(records), high)
        return records
    finally:
        consumer.close()


def last_values(records) -> dict[bytes, bytes | None]:
    state: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        state[key] = value
    return state


def uncleanable(cluster: LocalCluster) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[1]}/metrics", timeout=10).read().decode()
    return float(next(line.split()[1] for line in body.splitlines()
                      if line.startswith("flotilla_uncleanable_partitions ")))


def write_round(cluster: LocalCluster, round_number: int) -> dict[int, dict[bytes, bytes | None]]:
    """RECORDS records over KEYS keys on both partitions, then tombstones for DELETED; the expected last values."""
    records = [(i % 2, b"k%d" % (i % KEYS), b"r%d-%d" % (round_number, i)) for i in range(RECORDS)]
    records += [(partition, key, None) for partition in (0, 1) for key in DELETED]
    produce(cluster, records)
    expected = {0: {}, 1: {}}
    for partition, key, value in records:
        expected[partition][key] = value
    return expected


def roll_past(cluster: LocalCluster) -> None:
    """Records enough to fill a segment after what was written: the active segment is never cleaned."""
    produce(cluster, [(partition, b"after", b"x" * 200) for partition in (0, 1) for _ in range(60)])


def test_the_cleaner_keeps_the_last_value_of_every_key_and_drops_deleted_keys(cluster):
    compact_a_round(cluster)
    assert uncleanable(cluster) == 0


def compact_a_round(cluster: LocalCluster) -> None:
    """Write round 1 and wait until the cleaner has compacted both partitions."""
    expected = write_round(cluster, 1)
    roll_past(cluster)

    def compacted():
        for partition in (0, 1):
            records = read_from_start(cluster, partition)
            state = last_values(records)
            wanted = {key: value for key, value in expected[partition].items() if value is not None}
            assert {k: v for k, v in state.items() if k != b"after" and v is not None} == wanted
            assert len(records) < RECORDS // 4, len(records)  # superseded records are gone
            assert not {key for _, key, _ in records} & set(DELETED)  # tombstones too, after delete.retention.ms
        return True

    eventually(compacted, seconds=60, interval=1, what="both partitions compacted, the deleted keys gone")


def test_a_segment_the_cleaner_cannot_read_stops_that_partition_only(cluster):
    directory = os.path.join(cluster.directory, "node-1", "logs", f"{TOPIC}-0")
    if len(glob.glob(os.path.join(directory, "*.log"))) < 2:  # run apart from the test above (pytest-xdist)
        compact_a_round(cluster)
    closed = [path for path in sorted(glob.glob(os.path.join(directory, "*.log")))[:-1] if os.path.getsize(path) > 200]
    assert closed, os.listdir(directory)
    with open(closed[-1], "r+b") as segment:  # a flipped byte inside the first batch's CRC-covered records
        segment.seek(100)
        byte = segment.read(1)
        segment.seek(100)
        segment.write(bytes([byte[0] ^ 0xFF]))
    expected = write_round(cluster, 2)
    roll_past(cluster)
    eventually(lambda: uncleanable(cluster) == 1, seconds=30, what="partition 0 marked uncleanable")
    assert cluster.is_running(1)
    with open(cluster.log_path(1)) as log:
        assert '"event": "log_cleaning_failed"' in log.read()

    def partition_1_compacted():
        records = read_from_start(cluster, 1)
        state = {k: v for k, v in last_values(records).items() if k != b"after" and v is not None}
        assert state == {key: value for key, value in expected[1].items() if value is not None}
        assert len(records) < RECORDS // 4
        return True

    eventually(partition_1_compacted, seconds=60, interval=1, what="partition 1 still compacted")
    produce(cluster, [(0, b"k1", b"still-written")])  # the uncleanable partition still takes writes


def test_max_compaction_lag_gets_a_little_dirt_cleaned_that_the_dirty_ratio_would_leave(cluster):
    """KIP-354 on a real node: two compacted topics whose segments roll after 2 s (segment.ms on one,
    max.compaction.lag.ms on the other). The first 200 records are cleaned at a dirty ratio of 0; then, at a
    min.cleanable.dirty.ratio of 0.9 that five overwrites never reach, the overwrites roll into segments of their
    own: the cleaner takes the topic with max.compaction.lag.ms=2000 past its ratio and removes the overwritten
    values; the other keeps them. (Time-based rolls split the writes wherever the hour's load puts them, which
    is why the first pass runs at a ratio of 0.)"""
    topics = {"lagged": {"max.compaction.lag.ms": "2000"}, "ratio-bound": {"segment.ms": "2000"}}
    for name, configs in topics.items():
        create_topic(cluster, name, 1, 1, **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"},
                     **configs)
        eventually(lambda: topic_of(metadata(cluster), name), what=name)

    def checkpoint(name: str) -> int:
        path = os.path.join(cluster.directory, "node-1", "logs", f"{name}-0", "cleaner-offset-checkpoint")
        return int(open(path).read().split()[-1]) if os.path.exists(path) else -1

    def write_and_roll(records: list[tuple[bytes, bytes]], cleaned_to: int) -> None:
        for name in topics:
            produce(cluster, [(0, key, value) for key, value in records], topic=name)
        time.sleep(2.5)
        for name in topics:  # the next append rolls the 2.5 s old segment
            produce(cluster, [(0, b"k199", b"roll")], topic=name)
        for name in topics:
            eventually(lambda: checkpoint(name) >= cleaned_to, 30, what=f"{name} cleaned up to {cleaned_to}")

    write_and_roll([(b"k%d" % i, b"first") for i in range(200)], cleaned_to=200)
    overwritten = {(b"k%d" % i, b"first") for i in range(1, 6)}
    bootstrap = ("-b", cluster.bootstrap_servers)
    for name in topics:
        assert overwritten <= {(key, value) for _, key, value in read_from_start(cluster, 0, name)}
        altered = cli("topics", "alter-config", name, "--set", "min.cleanable.dirty.ratio=0.9", *bootstrap)
        assert altered.returncode == 0, altered.stderr
        eventually(lambda: {row["name"]: row["value"] for row in cli_json("topics", "configs", name, *bootstrap)[
            "configs"]}.get("min.cleanable.dirty.ratio") == "0.9", what=f"{name} at a dirty ratio of 0.9")
    for name in topics:  # five overwrites against 200 clean records: a dirty ratio far below 0.9
        produce(cluster, [(0, b"k%d" % i, b"second") for i in range(1, 6)], topic=name)
    time.sleep(2.5)
    for name in topics:
        produce(cluster, [(0, b"k0", b"roll")], topic=name)
    eventually(lambda: not overwritten & {(key, value) for _, key, value in read_from_start(cluster, 0, "lagged")},
               30, what="the overwritten values cleaned past the dirty ratio")
    assert checkpoint("ratio-bound") == 200  # its pass skipped: the segment of the overwrites waits
    assert overwritten <= {(key, value) for _, key, value in read_from_start(cluster, 0, "ratio-bound")}


def test_a_tombstone_outlives_its_horizon_while_a_replica_is_down_and_goes_once_it_is_back(tmp_path):
    # Three real nodes: with a follower down (fenced, out of the ISR) a tombstone stays past delete.retention.ms
    # through passes that remove superseded records; the follower, which holds the key's older value, is back
    # in the ISR, and the next passes remove the tombstone. Kafka's cleaner would remove it while the follower
    # is down, and the follower would keep the deleted key.
    cluster = LocalCluster(str(tmp_path), nodes=3, broker={**FAST_BROKER_SETTINGS,
                                                            "log_retention_check_interval_ms": 500})
    with cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, TOPIC, 1, 3, **{"cleanup.policy": "compact", "segment.bytes": "8192",
                                              "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000",
                                              "min.insync.replicas": "1"})

        def partition_state() -> dict:
            running = [node for node in cluster.kafka_ports if cluster.is_running(node)]
            return topic_of(metadata(cluster, *running), TOPIC)["partitions"][0]

        produce_one(cluster, [(b"gone", b"old")] + [(b"k%d" % i, b"v0") for i in range(KEYS)])
        state = eventually(partition_state, what="the partition's state")
        eventually(lambda: len(partition_state()["isr"]) == 3, what="all three replicas in sync")
        follower = next(node for node in partition_state()["replicas"] if node != state["leader"])
        cluster.kill(follower)
        eventually(lambda: follower not in partition_state()["isr"], seconds=30, what="the follower out of the ISR")
        produce_one(cluster, [(b"gone", None)])

        def superseded_gone(round_number: int) -> bool:
            produce_one(cluster, [(b"k%d" % i, b"v%d" % round_number) for i in range(KEYS)]
                        + [(b"pad", b"x" * 300)] * 40)
            records = read_from_start(cluster, 0)
            return not any(key.startswith(b"k") and value != b"v%d" % round_number for _, key, value in records)

        eventually(lambda: superseded_gone(1), seconds=30, interval=1, what="a pass: the tombstone's horizon stamped")
        time.sleep(1.5)  # the horizon (delete.retention.ms after that pass) passes
        eventually(lambda: superseded_gone(2), seconds=30, interval=1, what="a pass after the horizon")
        assert (b"gone", None) in {(key, value) for _, key, value in read_from_start(cluster, 0)}

        cluster.start_node(follower)
        eventually(lambda: len(partition_state()["isr"]) == 3, seconds=60, what="the follower back in the ISR")

        def tombstone_gone() -> bool:
            superseded_gone(3)
            return b"gone" not in {key for _, key, _ in read_from_start(cluster, 0)}

        eventually(tombstone_gone, seconds=60, interval=1, what="the tombstone removed once every replica is in sync")


def produce_one(cluster: LocalCluster, pairs: list[tuple[bytes, bytes | None]]) -> None:
    produce(cluster, [(0, key, value) for key, value in pairs])

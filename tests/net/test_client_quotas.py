"""Client byte-rate quotas on a real node: `flotilla quotas` and kafka-python's AlterClientQuotas /
DescribeClientQuotas messages (generated from Kafka's own schemas) set and read them; a confluent-kafka producer
and consumer under a quota are throttled (librdkafka's throttle callback fires, the bytes they move stay within
what the quota allows) while another client id on the same node is not; the quotas survive a restart."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from broker.quotas import WINDOW_MS_DEFAULT, WINDOW_NUM_DEFAULT
from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, create_topic, eventually, wait_for_quorum
from tests.net.test_metrics_endpoint import scrape

pytestmark = [pytest.mark.slow, pytest.mark.external]

QUOTA = 100_000  # bytes per second
SECONDS = 4.0
RECORD = 1_000


def flotilla(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "quotas", *args, "-b", cluster.bootstrap_servers],
                          capture_output=True, text=True, timeout=60)


def allowed_bytes(seconds: float) -> float:
    """The most a client under QUOTA can move in `seconds` from a standing start: the quota over the elapsed time
    plus the window the rate is averaged over (a new client may burst that much first), plus one request."""
    window_s = (WINDOW_NUM_DEFAULT - 1) * WINDOW_MS_DEFAULT / 1000
    return QUOTA * (seconds + window_s) + 1_100_000


def produce_for(bootstrap: str, client_id: str, seconds: float, bytes_max: int = 64_000_000) -> tuple[int, list[float]]:
    """Bytes delivered by a confluent-kafka producer writing as fast as it may for `seconds` (at most
    `bytes_max`), and the throttle times librdkafka reported."""
    from confluent_kafka import Producer

    throttles: list[float] = []
    delivered = [0]

    def on_delivery(error, message) -> None:
        if error is None:
            delivered[0] += len(message.value())

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 4096, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline and delivered[0] < bytes_max:
        if sent >= bytes_max:
            producer.poll(0.01)
            continue
        try:
            producer.produce("q", b"x" * RECORD, on_delivery=on_delivery)
            sent += RECORD
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    counted = delivered[0]  # what was delivered within the time; the rest is dropped
    producer.purge()
    producer.flush(5)
    return counted, throttles


def produce_one_by_one(bootstrap: str, client_id: str, count: int) -> list[float]:
    """The throttle times librdkafka reported for `count` records sent one request each (linger.ms=0)."""
    from confluent_kafka import Producer

    throttles: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 0, "acks": 1,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    for _ in range(count):
        producer.produce("q", b"x" * 10)
        producer.flush(30)
    return throttles


def consume_for(bootstrap: str, client_id: str, seconds: float, bytes_max: int = 64_000_000) -> tuple[int, list[float]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    throttles: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                         "enable.auto.commit": False, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    consumer.assign([TopicPartition("q", 0, OFFSET_BEGINNING)])  # no group to join: every second is fetching
    received = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and received < bytes_max:
        for message in consumer.consume(1000, 0.2):
            if not message.error():
                received += len(message.value())
    consumer.close()
    return received, throttles


def kafka_python_send(bootstrap: str, request):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin._manager.run(admin._manager.send, request)
    finally:
        admin.close()


def test_quotas_are_set_described_enforced_and_survive_a_restart(tmp_path):
    with LocalCluster(str(tmp_path), nodes=1, broker=FAST_BROKER_SETTINGS, metrics=True) as cluster:
        wait_for_quorum(cluster)
        create_topic(cluster, "q", 1, 1)
        bootstrap = cluster.bootstrap_servers

        # The CLI: set, read back (table and JSON), refuse a key the entity does not take, and bad usage.
        result = flotilla(cluster, "alter", "--client-id", "slow", "--add", f"producer_byte_rate={QUOTA}",
                          "--add", f"consumer_byte_rate={QUOTA}")
        assert result.returncode == 0, result.stderr
        refused = flotilla(cluster, "alter", "--user-default", "--add", "connection_creation_rate=5")
        assert refused.returncode == 1 and "Invalid configuration key connection_creation_rate" in refused.stderr, \
            refused.stderr  # an ip entity's key (KIP-612), not a user's
        usage = flotilla(cluster, "alter", "--client-id", "slow")
        assert usage.returncode == 2 and "nothing to change" in usage.stderr

        def described() -> list:
            shown = flotilla(cluster, "describe", "--json")
            assert shown.returncode == 0, shown.stderr
            return json.loads(shown.stdout)

        slow = {"entity": {"client-id": "slow"}, "quotas": {"consumer_byte_rate": float(QUOTA),
                                                            "producer_byte_rate": float(QUOTA)}}
        eventually(lambda: described() == [slow], 10, what="the quota in the broker's image")

        # kafka-python's messages, from Kafka's schemas: a user + default client-id entity, set then read back
        # with a filter (exact user, default client id, strict).
        from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

        alter = AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="user", entity_name="kp"),
                    AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id", entity_name=None)],
            ops=[AlterClientQuotasRequest.EntryData.OpData(key="consumer_byte_rate", value=4096.0, remove=False)])],
            validate_only=False)
        answer = kafka_python_send(bootstrap, alter)
        assert [entry.error_code for entry in answer.entries] == [0]
        describe = DescribeClientQuotasRequest(components=[
            DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=0, match="kp"),
            DescribeClientQuotasRequest.ComponentData(entity_type="client-id", match_type=1, match=None)],
            strict=True)

        def kp_quota():
            entries = kafka_python_send(bootstrap, describe).entries
            return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
                    for entry in entries]

        eventually(lambda: kp_quota() == [({"user": "kp", "client-id": None}, {"consumer_byte_rate": 4096.0})], 10,
                   what="kafka-python reads back its quota")

        # Enforcement: the quota'd client id is throttled and stays within what the quota allows; another
        # client id on the same node is not.
        produced, throttles = produce_for(bootstrap, "slow", SECONDS)
        assert throttles and max(throttles) > 0, "librdkafka saw no throttle"
        assert 0 < produced <= allowed_bytes(SECONDS), produced
        cap = int(4 * allowed_bytes(SECONDS))
        unthrottled, other_throttles = produce_for(bootstrap, "fast", SECONDS, cap)
        assert other_throttles == [] and unthrottled > 3 * allowed_bytes(SECONDS), unthrottled
        consumed, consumer_throttles = consume_for(bootstrap, "slow", SECONDS)
        assert consumer_throttles and 0 < consumed <= allowed_bytes(SECONDS), consumed
        free, _ = consume_for(bootstrap, "fast", SECONDS, cap)
        assert free > 3 * allowed_bytes(SECONDS), free
        metrics = scrape(cluster, 1)
        for quota in ("producer_byte_rate", "consumer_byte_rate"):
            assert metrics["flotilla_client_throttles_total"][(("quota", quota),)] >= 1
            assert metrics["flotilla_client_throttle_seconds_total"][(("quota", quota),)] > 0

        # A request quota: a client sending one small produce per request at 0.001% of a thread (10 us of
        # handling per second) is throttled within a few requests, each throttle at most one window.
        assert flotilla(cluster, "alter", "--client-id", "chatty", "--add", "request_percentage=0.001").returncode == 0
        eventually(lambda: any(e["entity"] == {"client-id": "chatty"} for e in described()), 10,
                   what="the request quota in the broker's image")
        request_throttles = produce_one_by_one(bootstrap, "chatty", 8)
        assert request_throttles and max(request_throttles) <= WINDOW_MS_DEFAULT / 1000 + 0.001, request_throttles
        metrics = scrape(cluster, 1)
        assert metrics["flotilla_client_throttles_total"][(("quota", "request_percentage"),)] >= 1

        # The quotas are metadata: after a restart the node has them still; removing one leaves the other.
        import signal

        cluster.kill(1, signal.SIGTERM)
        cluster.start_node(1)
        wait_for_quorum(cluster)
        eventually(lambda: slow in described(), 30, what="the quota after a restart")
        assert flotilla(cluster, "alter", "--client-id", "slow", "--delete", "producer_byte_rate").returncode == 0
        eventually(lambda: {"entity": {"client-id": "slow"}, "quotas": {"consumer_byte_rate": float(QUOTA)}}
                   in described(), 10, what="one quota removed")


def test_a_controller_mutation_quota_throttles_a_client_creating_and_deleting_partitions(tmp_path):
    """KIP-599 on the versions librdkafka speaks (permissive): every topic is created, and once the client's
    token bucket (2 partitions a second, a burst of 22) is empty its answers carry a throttle time and its
    connection is muted; deletions count too; another client id is not throttled."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    with LocalCluster(str(tmp_path), nodes=1, broker=FAST_BROKER_SETTINGS, metrics=True) as cluster:
        wait_for_quorum(cluster)
        assert flotilla(cluster, "alter", "--client-id", "storm", "--add", "controller_mutation_rate=2").returncode == 0
        eventually(lambda: json.loads(flotilla(cluster, "describe", "--json").stdout), 10, what="the quota")

        def admin(client_id: str) -> tuple[AdminClient, list[float]]:
            throttles: list[float] = []
            return AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id,
                                "throttle_cb": lambda event: throttles.append(event.throttle_time)}), throttles

        def done(futures: dict) -> None:
            for future in futures.values():
                assert future.result(30) is None

        storm, storm_throttles = admin("storm")
        for index in range(3):  # 30 partitions against a burst of 22: the third answer is throttled
            done(storm.create_topics([NewTopic(f"s{index}", 10, 1)], operation_timeout=20))
            storm.poll(0.1)
        storm.poll(0.5)
        assert {f"s{i}" for i in range(3)} <= set(storm.list_topics(timeout=20).topics)
        # At most the 8 missing tokens' refill time (4 s), less what refilled while the requests went out.
        assert storm_throttles and 0.5 < max(storm_throttles) <= 4.0, storm_throttles
        metrics = scrape(cluster, 1)
        assert metrics["flotilla_client_throttles_total"][(("quota", "controller_mutation_rate"),)] >= 1
        throttled_before = metrics["flotilla_client_throttles_total"][(("quota", "controller_mutation_rate"),)]

        calm, calm_throttles = admin("calm")
        done(calm.create_topics([NewTopic("c0", 30, 1)], operation_timeout=20))
        done(calm.create_partitions([NewPartitions("c0", 40)], operation_timeout=20))
        calm.poll(0.5)
        assert calm_throttles == []

        # Deleting 30 partitions and adding 10 to another topic take tokens too (the bucket is still below 0).
        done(storm.delete_topics(["s0", "s1", "s2"], operation_timeout=20))
        done(storm.create_partitions([NewPartitions("c0", 50)], operation_timeout=20))
        storm.poll(0.5)
        metrics = scrape(cluster, 1)
        assert metrics["flotilla_client_throttles_total"][(("quota", "controller_mutation_rate"),)] >= \
            throttled_before + 2

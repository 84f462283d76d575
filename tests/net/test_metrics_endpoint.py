"""The metrics endpoint of real nodes under a confluent-kafka load: Prometheus text that prometheus_client's
own parser reads, exact message and byte counts, under-replicated partitions following a killed follower,
group lag as `flotilla groups describe` reports it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, cli, create_topic, eventually, wait_for_quorum

pytestmark = [pytest.mark.slow, pytest.mark.external]
RECORDS = 500
VALUE_BYTES = 100


def scrape(cluster: LocalCluster, node_id: int) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of one node's endpoint."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[node_id]}/metrics", timeout=10).read()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def total(cluster: LocalCluster, name: str, **labels: str) -> float:
    value = 0.0
    for node_id in cluster.kafka_ports:
        if cluster.is_running(node_id):
            try:
                samples = scrape(cluster, node_id)
            except urllib.error.URLError as error:  # a node just started listens for Kafka before metrics
                raise AssertionError(f"node {node_id}'s metrics endpoint: {error}") from None
            for key, sample in samples.get(name, {}).items():
                if all(dict(key).get(k) == v for k, v in labels.items()):
                    value += sample
    return value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("metrics")), nodes=3, metrics=True,
                           broker={**FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 3,
                                   "replica_lag_time_max_ms": 3000})
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def test_messages_and_bytes_in_are_exact_and_requests_are_counted(cluster):
    from confluent_kafka import Producer

    create_topic(cluster, "m", 3, 3)
    delivered = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                         "compression.type": "none"})
    for index in range(RECORDS):
        producer.produce("m", value=bytes([index % 256]) * VALUE_BYTES, key=str(index).encode(),
                         on_delivery=lambda error, message: delivered.append((error, message)))
    producer.flush(30)
    assert [e for e, _ in delivered if e is not None] == [] and len(delivered) == RECORDS
    assert total(cluster, "flotilla_messages_in_total", topic="m") == RECORDS
    # bytes in are the record batches as appended: exactly what the leaders' logs of m hold
    bytes_in = total(cluster, "flotilla_bytes_in_total", topic="m")
    leader_log_bytes = 0.0
    for node_id in cluster.kafka_ports:
        samples = scrape(cluster, node_id)
        led = {dict(k)["partition"] for k in samples.get("flotilla_partition_high_watermark", {})
               if dict(k)["topic"] == "m"}
        leader_log_bytes += sum(v for k, v in samples.get("flotilla_log_size_bytes", {}).items()
                                if dict(k)["topic"] == "m" and dict(k)["partition"] in led)
    assert bytes_in == leader_log_bytes and RECORDS * VALUE_BYTES < bytes_in
    assert total(cluster, "flotilla_requests_total", api="produce", acks="-1") >= 1
    assert total(cluster, "flotilla_request_latency_seconds_count", api="produce", acks="-1") == \
        total(cluster, "flotilla_requests_total", api="produce", acks="-1")
    assert total(cluster, "flotilla_leader_partitions") >= 3
    assert total(cluster, "flotilla_raft_is_leader") == 1
    samples = scrape(cluster, 1)
    internal = samples["flotilla_internal_errors_total"]  # every kind exported, none happened
    kinds = ("request", "answer", "encode", "poll", "replica", "controller_call", "outbox")
    assert internal == {(("where", w),): 0.0 for w in kinds}
    assert samples["flotilla_forwarded_answers_unapplied_total"] == {(): 0.0}  # topic m's creation had its image
    # The other nodes' followers and Raft peers are connected; no limit was reached
    connections = samples["flotilla_connections"]
    assert connections[(("listener", "PLAINTEXT"),)] >= 2 and connections[(("listener", "CONTROLLER"),)] >= 2
    for name in ("flotilla_connections_refused_total", "flotilla_connection_accept_failures_total",
                 "flotilla_connections_throttled_total"):
        assert samples[name] == {(("port", p),): 0.0 for p in ("controller", "kafka", "metrics")}, name
    assert samples["flotilla_connection_accept_waits_total"] == {
        (("port", p), ("reason", r)): 0.0 for p in ("controller", "kafka", "metrics")
        for r in ("creation_rate", "listener_max_connections", "max_connections")}
    assert samples["flotilla_connections_max"][(("port", "kafka"),)] > 16


def test_a_killed_follower_makes_partitions_under_replicated_until_it_returns(cluster):
    create_topic(cluster, "u", 6, 3)
    eventually(lambda: total(cluster, "flotilla_under_replicated_partitions") == 0, 30, what="all ISRs full")
    cluster.kill(3)
    # Every partition node 3 replicates becomes under-replicated once its leader (moved off node 3 if it was
    # there) drops it from the ISR: with RF=3 on 3 nodes, every partition of the cluster.
    from confluent_kafka.admin import AdminClient

    def shrunk():
        topics = AdminClient({"bootstrap.servers": cluster.bootstrap_of(1)}).list_topics(timeout=10).topics
        expected = sum(1 for t in topics.values() for p in t.partitions.values() if 3 in p.replicas)
        return total(cluster, "flotilla_under_replicated_partitions") == expected and expected >= 6  # u's at least
    eventually(shrunk, 60, what="under-replicated partitions after the kill")
    assert total(cluster, "flotilla_isr_changes_total", direction="shrink") >= 1
    cluster.start_node(3)
    eventually(lambda: total(cluster, "flotilla_under_replicated_partitions") == 0, 60, what="ISRs full again")
    assert total(cluster, "flotilla_isr_changes_total", direction="expand") >= 1


def test_group_lag_matches_flotilla_groups_describe(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(cluster, "lagged", 3, 3)  # its own topic: the module's tests may run apart (pytest-xdist)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for index in range(60):
        producer.produce("lagged", value=b"x", partition=index % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "lagging",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("lagged", p, 10) for p in range(3)], asynchronous=False)
    consumer.close()
    described = json.loads(cli("groups", "describe", "lagging", "-b", cluster.bootstrap_servers, "--json").stdout)
    rows = described["offsets"] if isinstance(described, dict) and "offsets" in described else described
    expected = {}
    for row in (rows if isinstance(rows, list) else []):
        expected[row["partition"]] = row["lag"]
    assert len(expected) == 3, described

    def matches():
        return all(total(cluster, "flotilla_group_lag", group="lagging", topic="lagged", partition=str(p)) == lag
                   for p, lag in expected.items())

    eventually(matches, 30, what="group lag metric equal to groups describe")


def test_a_node_process_froze_its_start_up_heap_and_times_its_collections(cluster):
    """net/heap.py in a node's own process: the objects alive once it served are frozen (collections skip
    them), and every collection since is counted and timed per generation."""
    import gc

    for node_id in cluster.kafka_ports:
        samples = scrape(cluster, node_id)
        frozen = samples["flotilla_gc_frozen_objects"][()]
        assert frozen > 10_000, f"node {node_id} froze only {frozen} objects"
        young = samples["flotilla_gc_pause_seconds_count"][(("generation", "0"),)]
        assert young > 0, f"node {node_id} timed no collection"
        assert samples["flotilla_gc_pause_seconds_sum"][(("generation", "0"),)] > 0
    assert gc.get_freeze_count() == 0, "the test process's own collector was frozen"

"""Fetching from the closest replica (KIP-392) on real nodes with librdkafka: three nodes in three racks and
`replica_selector = "rack"`; a confluent-kafka consumer with `client.rack` set to a follower's rack is sent there
by the leader and reads every record, exactly once and in order, from that follower; a consumer in the leader's
rack and one without a rack read from the leader; kafkajs with `rackId` is sent to the follower too. Who served is
read off each node's `flotilla_bytes_out`. librdkafka's rack-aware range assignor (KIP-881, in the client) gives
each member of a classic group the partitions in its rack, from the racks Metadata reports."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, cli, create_topic, eventually, metadata, topic_of, \
    wait_for_quorum
from tests.net.test_kafkajs import ROOT, node_path  # noqa: F401  (fixture)
from tests.net.test_metrics_endpoint import scrape

pytestmark = [pytest.mark.slow, pytest.mark.external]
RECORDS = 2_000
RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("follower-fetch")), nodes=3, metrics=True, racks=RACKS,
                           broker={**FAST_BROKER_SETTINGS, "replica_selector": "rack"})
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def bytes_out(cluster: LocalCluster, node_id: int, topic: str) -> float:
    return scrape(cluster, node_id).get("flotilla_bytes_out_total", {}).get((("topic", topic),), 0.0)


def produce_to_new_topic(cluster: LocalCluster, topic: str, values: list[str]) -> int:
    """Create `topic` (one partition, three replicas), write `values` to it with acks=all and wait until all
    three replicas are in sync; its leader."""
    from confluent_kafka import Producer

    create_topic(cluster, topic, 1, 3, min_insync_replicas="2")
    leader = eventually(lambda: topic_of(metadata(cluster), topic)["partitions"][0]["leader"])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value.encode(), partition=0)
    assert producer.flush(30) == 0
    eventually(lambda: len(topic_of(metadata(cluster), topic)["partitions"][0]["isr"]) == 3, what="ISR of 3")
    return leader


def consume_all(cluster: LocalCluster, topic: str, group: str, rack: str | None) -> list[bytes]:
    from confluent_kafka import Consumer

    config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False}
    if rack is not None:
        config["client.rack"] = rack
    consumer = Consumer(config)
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        def read_all() -> bool:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
            return len(values) >= RECORDS

        eventually(read_all, seconds=60, interval=0, what=f"{RECORDS} records for {group}")
    finally:
        consumer.close()
    return values


def test_each_node_registers_its_rack_and_the_cli_lists_it(cluster):
    listed = json.loads(cli("brokers", "-b", cluster.bootstrap_servers, "--json").stdout)
    assert {b["id"]: b["rack"] for b in listed} == RACKS
    table = cli("brokers", "-b", cluster.bootstrap_servers).stdout.splitlines()
    assert table[0].split() == ["ID", "HOST", "PORT", "RACK", "ROLES", "EPOCH", "STATUS", "STATE"]
    assert "rack-b" in table[2] and table[2].split()[-2:] == ["active", "RUNNING"]
    assert {b["id"]: b["rack"] for b in metadata(cluster)["brokers"]} == RACKS  # `flotilla metadata dump`


def test_a_consumer_reads_from_the_follower_in_its_rack_and_others_from_the_leader(cluster):
    from confluent_kafka import Producer

    create_topic(cluster, "near", 1, 3, min_insync_replicas="2")
    partition = eventually(lambda: topic_of(metadata(cluster), "near")["partitions"][0])
    leader = partition["leader"]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
    sent = [b"value-%05d" % i for i in range(RECORDS)]
    for value in sent:
        producer.produce("near", value=value, partition=0)
    assert producer.flush(30) == 0
    eventually(lambda: len(topic_of(metadata(cluster), "near")["partitions"][0]["isr"]) == 3, what="ISR of 3")
    follower = min(node for node in RACKS if node != leader)

    before = {node: bytes_out(cluster, node, "near") for node in RACKS}
    assert consume_all(cluster, "near", "in-follower-rack", RACKS[follower]) == sent
    after = {node: bytes_out(cluster, node, "near") for node in RACKS}
    assert after[follower] - before[follower] >= RECORDS * len(sent[0])  # the records came from the follower
    assert after[leader] - before[leader] < len(sent[0]) * 10  # the leader only pointed there

    for group, rack in (("in-leader-rack", RACKS[leader]), ("no-rack", None)):
        before = after
        assert consume_all(cluster, "near", group, rack) == sent
        after = {node: bytes_out(cluster, node, "near") for node in RACKS}
        assert after[leader] - before[leader] >= RECORDS * len(sent[0]), group
        assert all(after[node] == before[node] for node in RACKS if node != leader), group


def test_flotilla_consume_with_a_rack_reads_from_the_follower_in_it(cluster):
    """Flotilla's own client (net/client/aio.py, through `flotilla consume --rack`) follows the leader's
    preferred_read_replica as librdkafka does; without --rack it reads from the leader."""
    sent = [f"cli-{i:05d}" for i in range(RECORDS)]
    leader = produce_to_new_topic(cluster, "near-cli", sent)
    follower = max(node for node in RACKS if node != leader)

    def consume(*rack: str) -> list[str]:
        result = cli("consume", "near-cli", "-b", cluster.bootstrap_servers, "--from-beginning",
                     "--count", str(RECORDS), *rack, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    before = {node: bytes_out(cluster, node, "near-cli") for node in RACKS}
    assert consume("--rack", RACKS[follower]) == sent
    after = {node: bytes_out(cluster, node, "near-cli") for node in RACKS}
    assert after[follower] - before[follower] >= RECORDS * len(sent[0])  # the records came from the follower
    assert after[leader] == before[leader]  # the leader only pointed there
    before = after
    assert consume() == sent
    after = {node: bytes_out(cluster, node, "near-cli") for node in RACKS}
    assert after[leader] - before[leader] >= RECORDS * len(sent[0]) and after[follower] == before[follower]


def test_kafkajs_with_a_rack_id_reads_from_the_follower_in_its_rack(cluster, node_path):  # noqa: F811
    sent = [f"js-{i:05d}" for i in range(RECORDS)]
    leader = produce_to_new_topic(cluster, "near-js", sent)
    follower = max(node for node in RACKS if node != leader)
    before = bytes_out(cluster, follower, "near-js")
    run = subprocess.run(["node", os.path.join(ROOT, "tests", "clients", "kafkajs_rack.js"), cluster.bootstrap_servers,
                          "near-js", RACKS[follower], str(RECORDS)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NODE_PATH": node_path})
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == [[0, offset, value] for offset, value in enumerate(sent)]
    assert bytes_out(cluster, follower, "near-js") - before >= RECORDS * len(sent[0])


def test_librdkafka_assigns_each_member_of_a_classic_group_the_partitions_in_its_rack(cluster):  # KIP-881
    # The rack-aware assignors run in the client, from the racks Metadata reports for each partition's replicas.
    from confluent_kafka import Consumer

    create_topic(cluster, "by-rack", 6, 1)
    partitions = eventually(lambda: topic_of(metadata(cluster), "by-rack")["partitions"])
    rack_of_partition = {p["partition"]: RACKS[p["replicas"][0]] for p in partitions}
    assert sorted(rack_of_partition.values()) == sorted(list(RACKS.values()) * 2)  # two replicas per rack
    consumers = {rack: Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "racked",
                                 "client.rack": rack, "partition.assignment.strategy": "range",
                                 "session.timeout.ms": 10_000})
                 for rack in RACKS.values()}
    try:
        for consumer in consumers.values():
            consumer.subscribe(["by-rack"])

        def assigned() -> dict[str, list[int]]:
            for consumer in consumers.values():
                consumer.poll(0.2)
            current = {rack: sorted(tp.partition for tp in consumer.assignment()) for rack, consumer in consumers.items()}
            assert all(current.values()), current  # every member is in the generation
            assert sorted(p for owned in current.values() for p in owned) == list(range(6)), current
            return current

        owned = eventually(assigned, seconds=60, interval=0, what="six partitions over three members")
        assert {rack: [rack_of_partition[p] for p in parts] for rack, parts in owned.items()} == {
            rack: [rack, rack] for rack in RACKS.values()}
    finally:
        for consumer in consumers.values():
            consumer.close()

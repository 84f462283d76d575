"""A secured cluster with a broker-only node: three controllers and a KRaft observer, every listener SASL_SSL,
the controller port over TLS and ACLs on. The observer fetches the metadata log from the controllers over TLS,
registers, replicates over the secured inter-broker listener into the ISR, leads partitions, serves clients that
know only its address and enforces the ACLs the controllers committed."""

from __future__ import annotations

import json

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, eventually
from tests.security.test_secured_cluster import flotilla, ok

pytestmark = [pytest.mark.slow, pytest.mark.external]
TOPIC = "spread"
PARTITIONS = 8


def test_a_broker_only_node_joins_a_secured_cluster_and_serves(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker_only=1, secure=True,
                           broker={**FAST_BROKER_SETTINGS, "offsets_topic_num_partitions": 3})
    [observer] = cluster.broker_only_ids
    cluster.start()
    try:
        def ready():
            status = json.loads(ok(flotilla(cluster, "quorum", "status", "--json")))
            assert status["leader_id"] is not None and all(v["lag"] == 0 for v in status["voters"]), status
            assert [o["id"] for o in status["observers"]] == [observer], status
            brokers = json.loads(ok(flotilla(cluster, "brokers", "--json")))
            assert {b["id"]: b["status"] for b in brokers} == {1: "active", 2: "active", 3: "active",
                                                               observer: "active"}, brokers
            return True

        eventually(ready, 60, what="the secured quorum and its observer ready")
        ok(flotilla(cluster, "topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3"))
        ok(flotilla(cluster, "users", "add", "dave", "--password", "dave-secret", "--mechanism", "SCRAM-SHA-512"))

        # Clients that know only the observer's address: the admin writes and reads every partition.
        only_observer = {**cluster.client_properties(), "bootstrap.servers": cluster.bootstrap_of(observer)}
        producer = Producer({**only_observer, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        for index in range(400):
            producer.produce(TOPIC, value=str(index).encode(), partition=index % PARTITIONS)
        assert producer.flush(60) == 0

        def observer_in_sync():
            described = json.loads(ok(flotilla(cluster, "topics", "describe", TOPIC, "--json")))
            held = [p for p in described["partitions"] if observer in p["replicas"]]
            assert held and all(observer in p["isr"] for p in held), described["partitions"]
            assert any(p["leader"] == observer for p in described["partitions"]), described["partitions"]
            return held

        held = eventually(observer_in_sync, 60, what="the observer's replicas in the ISR, some led by it")
        assert len(held) >= 3

        consumer = Consumer({**only_observer, "group.id": "readers", "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        values = set()
        for _ in range(120):
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                values.add(int(message.value()))
            if len(values) == 400:
                break
        consumer.close()
        assert values == set(range(400))

        # A SCRAM user the controllers know, with no ACL: the observer authenticates and refuses.
        dave = {**cluster.client_properties("dave", "dave-secret", "SCRAM-SHA-512"),
                "bootstrap.servers": cluster.bootstrap_of(observer)}
        refused = Consumer({**dave, "group.id": "dave"})
        refused.assign([TopicPartition(TOPIC, 0, 0)])
        errors = set()
        for _ in range(40):
            message = refused.poll(0.5)
            if message is not None and message.error() is not None:
                errors.add(message.error().name())
                break
        refused.close()
        assert errors & {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}, errors
        outcomes = []
        writer = Producer({**dave, "message.timeout.ms": 10_000})
        writer.produce(TOPIC, value=b"x", partition=0, on_delivery=lambda error, _: outcomes.append(error))
        writer.flush(20)
        assert [error.name() for error in outcomes] == ["TOPIC_AUTHORIZATION_FAILED"], outcomes
    finally:
        cluster.stop()

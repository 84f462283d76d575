"""A user's test suite as it would be written against Flotilla instead of a Kafka container: only the
`flotilla_cluster` fixture (the pytest plugin installed with the package) and confluent-kafka."""

import pytest
from confluent_kafka import Consumer, Producer

pytestmark = [pytest.mark.slow, pytest.mark.external]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> int:
    delivered = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda error, message: delivered.append(error is None))
    producer.flush(30)
    return sum(delivered)


def consume(bootstrap: str, topic: str, group: str, count: int, seconds: float = 30.0) -> list[bytes]:
    import time

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received, deadline = [], time.monotonic() + seconds
    try:
        while len(received) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                received.append(message.value())
    finally:
        consumer.close()
    return received


def test_produce_and_consume_with_a_group(flotilla_cluster):
    flotilla_cluster.create_topic("orders", partitions=3)
    values = [f"order-{i}".encode() for i in range(200)]
    assert produce(flotilla_cluster.bootstrap_servers, "orders", values) == 200
    assert sorted(consume(flotilla_cluster.bootstrap_servers, "orders", "billing", 200)) == sorted(values)


@pytest.mark.flotilla(nodes=3)
def test_a_three_node_cluster_survives_a_killed_node(flotilla_cluster):
    flotilla_cluster.create_topic("payments", partitions=2, replication_factor=3)
    assert produce(flotilla_cluster.bootstrap_servers, "payments", [b"before"] * 50) == 50
    flotilla_cluster.kill(2)
    assert produce(flotilla_cluster.bootstrap_servers, "payments", [b"during"] * 50) == 50
    flotilla_cluster.restart(2)
    assert produce(flotilla_cluster.bootstrap_servers, "payments", [b"after"] * 50) == 50
    received = consume(flotilla_cluster.bootstrap_servers, "payments", "audit", 150)
    assert sorted(received) == sorted([b"before"] * 50 + [b"during"] * 50 + [b"after"] * 50)


def test_two_clusters_from_the_factory_are_independent(flotilla_cluster_factory):
    first, second = flotilla_cluster_factory(), flotilla_cluster_factory()
    assert first.bootstrap_servers != second.bootstrap_servers
    first.create_topic("only-here")
    metadata = Consumer({"bootstrap.servers": second.bootstrap_servers, "group.id": "x"}).list_topics(timeout=10)
    assert "only-here" not in metadata.topics

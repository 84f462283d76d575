"""Fetch by sendfile: a real node answers consumer fetches on a plaintext listener with the records sent
from its segment files by os.sendfile (no copy through Python), and confluent-kafka reads exactly what was
produced. The node's metrics count the sendfile calls and bytes (flotilla_sendfile_total)."""

from __future__ import annotations

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import FAST_BROKER_SETTINGS, create_topic, eventually, wait_for_quorum
from tests.net.test_metrics_endpoint import total

pytestmark = [pytest.mark.slow, pytest.mark.external]
RECORDS = 5_000
VALUE_BYTES = 1_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(str(tmp_path_factory.mktemp("sendfile")), nodes=1, metrics=True,
                           broker=FAST_BROKER_SETTINGS)
    cluster.start()
    wait_for_quorum(cluster)
    yield cluster
    cluster.stop()


def test_consumer_fetches_are_sent_by_sendfile_and_read_back_exactly(cluster):
    from confluent_kafka import Consumer, Producer

    create_topic(cluster, "sf", 2, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    values = [f"{i:08d}".encode() + bytes([i % 251]) * (VALUE_BYTES - 8) for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce("sf", value=value, partition=i % 2)
    assert producer.flush(30) == 0
    calls_before = total(cluster, "flotilla_sendfile_total", what="calls")
    bytes_before = total(cluster, "flotilla_sendfile_total", what="bytes")

    # Each partition's whole log (about 2.5 MB) in one fetch: a slice under SENDFILE_SLICE_BYTES_MIN leaves
    # inline with its reply, and with librdkafka's default 1 MB per partition a small last batch could be
    # fetched alone (seen once: 4,989,398 bytes by sendfile).
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "sf-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 8 * 2**20, "fetch.max.bytes": 16 * 2**20,
                         "receive.message.max.bytes": 17 * 2**20})
    consumer.subscribe(["sf"])
    read: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        def all_read() -> bool:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                read[message.partition()].append(message.value())
            return sum(map(len, read.values())) >= RECORDS
        eventually(all_read, 60, what=f"{RECORDS} records consumed")
    finally:
        consumer.close()
    assert read[0] == values[0::2] and read[1] == values[1::2], "records differ from what was produced"
    sent = total(cluster, "flotilla_sendfile_total", what="bytes") - bytes_before
    assert total(cluster, "flotilla_sendfile_total", what="calls") > calls_before
    assert sent >= RECORDS * VALUE_BYTES, f"only {sent} bytes went by sendfile"

"""Replacing a controller whose disk is gone: the documented offline procedure (README "Replacing a
controller"), run on real processes. The voter set stays the same; the replacement takes the lost node's id
with an empty data directory once the surviving voters hold every committed entry (lag 0 behind one leader),
so no committed entry can exist only on the lost disk and an empty voter cannot help elect a node lacking
one. It must then catch up to an identical metadata image and serve its replicas again."""

from __future__ import annotations

import os
import shutil

import pytest

from cli.local_cluster import LocalCluster
from tests.cli.test_reassign_cluster import partitions
from tests.net.cluster_helpers import (
    FAST_BROKER_SETTINGS,
    create_topic,
    eventually,
    metadata,
    quorum_status,
    wait_for_quorum,
)

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_a_controller_whose_disk_is_gone_is_replaced_under_its_id(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    try:
        wait_for_quorum(cluster)
        create_topic(cluster, "kept", 3, 3)
        eventually(lambda: all(len(p["isr"]) == 3 for p in partitions(cluster, "kept").values()), 30)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        for i in range(300):
            producer.produce("kept", value=b"before-%d" % i, partition=i % 3)
        assert producer.flush(30) == 0

        lost = 2
        cluster.kill(lost)
        shutil.rmtree(os.path.join(cluster.directory, f"node-{lost}"))
        # Step 1: the survivors agree on a leader and hold every committed entry.
        survivors = (1, 3)
        status = eventually(lambda: (lambda s: s if s["leader_id"] in survivors and all(
            v["lag"] == 0 for v in s["voters"] if v["id"] in survivors) else None)(quorum_status(cluster, *survivors)),
            30, what="survivors caught up")
        create_topic(cluster, "while-gone", 1, 2)  # the quorum of two keeps committing meanwhile
        # Step 2: the replacement starts under the same id with an empty data directory.
        cluster.start_node(lost)
        wait_for_quorum(cluster, seconds=60)
        assert quorum_status(cluster)["epoch"] >= status["epoch"]
        # Its replicas come back from the leaders and rejoin every ISR; its image equals the others'.
        eventually(lambda: all(len(p["isr"]) == 3 for p in partitions(cluster, "kept").values()), 60,
                   what="the replacement back in every ISR")

        def identical_images():
            images = {node: metadata(cluster, node) for node in (1, 2, 3)}
            return images if images[lost]["topics"] == images[1]["topics"] == images[3]["topics"] else None

        images = eventually(identical_images, 30, what="identical metadata images")
        assert {t["name"] for t in images[lost]["topics"]} >= {"kept", "while-gone"}
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_of(lost), "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("kept", p, 0) for p in range(3)])
        values = set()
        for _ in range(60):
            values |= {m.value() for m in consumer.consume(1000, 0.5) if m.error() is None}
            if len(values) >= 300:
                break
        consumer.close()
        assert values == {b"before-%d" % i for i in range(300)}
    finally:
        cluster.stop()

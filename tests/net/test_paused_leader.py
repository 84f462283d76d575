"""A paused node that is both the active controller and a partition leader (SIGSTOP: alive, holding its
sockets, answering nothing) is replaced, and once resumed it rejoins as a follower without costing an
acknowledged write (acks=all, RF=3, min.insync.replicas=2).

Unlike a killed node, a paused one keeps its connections open: the clients', the followers' and the other
brokers' controller requests to it wait rather than fail. The survivors elect a new controller, which must
fence the paused broker from missing heartbeats alone while the survivors' own heartbeats reach it (a
heartbeat left waiting on the old controller would cost its broker the session, and with it the ISR places
that keep the partitions online). When it resumes it still believes it leads until the metadata it missed
reaches it. An idempotent confluent-kafka producer writes numbered messages across the pause; afterwards every
acknowledged message is read exactly once, in order, the resumed node is back in every ISR, and the replicas'
logs are identical up to the high watermark."""

import collections
import time

import pytest

from cli.local_cluster import LocalCluster
from tests.net.cluster_helpers import (FAST_BROKER_SETTINGS, NumberedDeliveries, cli_json, create_topic, eventually,
                                      logged_events, metadata, topic_of, wait_for_quorum)
from tests.net.test_failover_no_loss import assert_replicas_identical_up_to_high_watermark

pytestmark = [pytest.mark.slow, pytest.mark.external]
MESSAGES = 20_000
TOPIC = "numbered"


def test_a_paused_controller_and_leader_is_replaced_and_rejoins_without_losing_acknowledged_writes(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster = LocalCluster(str(tmp_path / "cluster"), nodes=3, broker=FAST_BROKER_SETTINGS)
    cluster.start()
    try:
        wait_for_quorum(cluster)
        create_topic(cluster, TOPIC, 3, 3, min_insync_replicas="2")
        victim = cli_json("quorum", "status", "-b", cluster.bootstrap_servers)["leader_id"]
        before = eventually(lambda: topic_of(metadata(cluster), TOPIC))
        # Three partitions on three brokers: each leads one, the controller too.
        assert victim in [p["leader"] for p in before["partitions"]], before
        survivors = [n for n in (1, 2, 3) if n != victim]
        epochs = {b["id"]: b["epoch"] for b in metadata(cluster)["brokers"]}
        producer = Producer({
            "bootstrap.servers": ",".join(cluster.bootstrap_of(n) for n in survivors),
            "acks": "all", "enable.idempotence": True, "linger.ms": 2, "message.timeout.ms": 120_000,
            "socket.timeout.ms": 5_000,  # a request to the paused node is given up and retried elsewhere
        })
        on_delivery = NumberedDeliveries()
        acknowledged, failures = on_delivery.acknowledged, on_delivery.failures

        def survivors_see_new_leader() -> bool:
            try:
                found = topic_of(metadata(cluster, survivors[0]), TOPIC)
            except Exception:
                return False
            return found is not None and all(p["leader"] in survivors for p in found["partitions"])

        for number in range(MESSAGES):
            producer.produce(TOPIC, value=str(number).encode(), partition=number % 3, on_delivery=on_delivery)
            producer.poll(0)
            if number == MESSAGES // 2:
                cluster.pause(victim)
                eventually(survivors_see_new_leader, 30)
                assert cluster.is_running(victim), "a paused node is not a dead one"
        assert producer.flush(120) == 0
        assert not failures, failures[:3]
        assert sum(len(v) for v in acknowledged.values()) == MESSAGES
        document = metadata(cluster, survivors[0])
        after = topic_of(document, TOPIC)
        assert all(p["leader"] in survivors for p in after["partitions"])
        assert all(victim not in p["isr"] for p in after["partitions"])
        # The survivors kept their sessions through the controller's failover: never fenced (a fenced broker
        # leaves every ISR, and the partitions whose ISR it leaves to the paused node go offline until it returns),
        # never re-registered.
        brokers = {b["id"]: b for b in document["brokers"]}
        assert brokers[victim]["status"] == "fenced"
        for node_id in survivors:
            assert (brokers[node_id]["status"], brokers[node_id]["epoch"]) == ("active", epochs[node_id]), brokers
        # What happened is in the survivors' logs: the new quorum leader, the paused broker fenced, the
        # partitions this node took over.
        for node_id in survivors:
            assert any(e["leader_id"] in survivors for e in logged_events(cluster, "quorum_leader", node_id)), node_id
            assert any(e["broker_id"] == victim for e in logged_events(cluster, "broker_fenced", node_id)), node_id
            assert logged_events(cluster, "partition_replicas", node_id), node_id
        log = cli_json("metadata", "dump", "--log", "-b", ",".join(cluster.bootstrap_of(n) for n in survivors))
        fenced = [r["broker_id"] for entry in log for r in entry["records"]
                  if r["type"] == "BrokerRegistrationChangeRecord" and r["fenced"] is True]
        assert fenced == [victim], f"brokers fenced: {fenced} (only the paused {victim} should be)"

        cluster.resume(victim)
        eventually(lambda: all(len(p["isr"]) == 3 for p in topic_of(metadata(cluster), TOPIC)["partitions"]), 60)

        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "verify",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        read = collections.defaultdict(list)
        deadline = time.monotonic() + 60
        while sum(len(v) for v in read.values()) < MESSAGES and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    read[message.partition()].append(int(message.value()))
        consumer.close()
        for partition in range(3):
            assert read[partition] == acknowledged[partition], (
                f"partition {partition}: not every acknowledged message exactly once in acknowledged order")
    finally:
        cluster.stop()  # (it continues a paused node)
    assert_replicas_identical_up_to_high_watermark(cluster)


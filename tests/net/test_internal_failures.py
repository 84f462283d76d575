"""Exceptions out of the broker's own code (bugs) that do not end the node. A handler group whose poll raises:
KafkaApis.poll polls the other groups all the same and hands the failure over (BrokerCore.failures); the node
counts it (`flotilla_internal_errors_total{where="poll"}`), logs it, and goes on serving. A follower that cannot
apply a leader's answer for one partition stops fetching that partition (Kafka's failed partitions) and the others
replicate on (`where="replica"`). Before, either exception left the node's loop and the whole node ended."""

from __future__ import annotations

import time

import trio

from metadata.requests import BrokerHeartbeatRequest, CreatableTopic, CreateTopicsRequest
from partitions.errors import ErrorCode
from net.protocol.codec import ApiKey
from tests.broker.test_broker_sans_io import Cluster, long_poll_then_produce, produce_request
from tests.net.cluster_helpers import create_led_topic, in_process_node


class FailingGroup:
    """A handler group with no APIs whose poll raises every time."""

    def __init__(self) -> None:
        self.polls = 0

    def api_handlers(self):
        return []

    def poll(self, now_ms, changed) -> None:
        self.polls += 1
        raise RuntimeError("planted: this group's poll fails")

    def next_deadline_ms(self):
        return None


def test_the_other_groups_are_polled_and_the_failure_handed_over():
    cluster = Cluster()
    created = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=1,
                                                                          replication_factor=3),)))
    assert created.topics[0].error_code == ErrorCode.NONE
    leader = cluster.images[1].topics.by_name["t"].partitions[0].leader
    apis = cluster.apis[leader]
    failing = FailingGroup()
    apis._groups.insert(0, failing)  # polled before the data plane, whose parked fetch must still complete
    assert long_poll_then_produce(cluster, leader, b"late") == [b"late"]
    failures = cluster.brokers[leader].take_failures()
    assert failing.polls >= 1 and [(f.where, f.subject) for f in failures] == [("poll", "FailingGroup")] * failing.polls
    assert str(failures[0].error) == "planted: this group's poll fails"
    assert cluster.brokers[leader].take_failures() == []  # taken once


def test_a_partition_whose_fetched_data_cannot_be_applied_stops_replicating_and_the_others_go_on():
    """Kafka's fetcher marks such a partition failed: it is fetched no more until its leadership changes."""
    cluster = Cluster()
    created = cluster.commit(CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=3,
                                                                          replication_factor=3),)))
    assert created.topics[0].error_code == ErrorCode.NONE
    states = cluster.images[1].topics.by_name["t"].partitions
    # The last replica of partition 0: it follows it now and, when its leader leaves, the replica before it leads.
    follower = states[0].replicas[-1]
    assert states[0].leader != follower
    other = next(p for p in (1, 2) if states[p].leader != follower)  # a partition it follows too
    broken = cluster.brokers[follower].partitions[("t", 0)]

    def update(*args, **kwargs):
        raise RuntimeError("planted: producer state update fails")

    broken.producer_state.update = update
    for partition in (0, other):
        cluster.call(states[partition].leader, ApiKey.PRODUCE, 7, produce_request("t", partition, [b"a", b"b"], acks=1))
    cluster.replicate()
    assert cluster.brokers[follower].partitions[("t", other)].log.log_end_offset == 2  # it replicated on
    failures = cluster.brokers[follower].take_failures()
    assert [(f.where, f.subject) for f in failures] == [("replica", "t-0")]
    assert broken.fetch_backoff_until_ms > cluster.now_ms + 10**12  # fetched no more
    sent = cluster.brokers[follower].next_replica_request(states[0].leader, cluster.now_ms)
    asked = set() if sent is None else {(t.topic, p.partition) for t in sent.request.topics for p in t.partitions}
    assert ("t", 0) not in asked
    # Its leadership changes (the leader shuts down; the middle replica leads): it is followed again, from a new
    # epoch, as Kafka re-adds a failed partition to its fetcher.
    old_leader = states[0].leader
    cluster.commit(BrokerHeartbeatRequest(broker_id=old_leader, broker_epoch=cluster.brokers[old_leader].broker_epoch,
                                          current_metadata_offset=cluster.raft_index, want_shutdown=True))
    new_leader = cluster.images[1].topics.by_name["t"].partitions[0].leader
    assert new_leader not in (old_leader, follower) and not broken.replica.is_leader
    assert broken.fetch_backoff_until_ms == 0
    del broken.producer_state.update  # the bug gone: it catches up with the new leader
    cluster.replicate()
    assert broken.log.log_end_offset == 2 and cluster.brokers[follower].take_failures() == []


def _produce_and_consume(bootstrap: str) -> list[bytes]:
    """With confluent-kafka: a consumer long-polls the empty partition (its fetch parks, to be completed by the
    data plane's poll), then ten records are produced with acks=all; what the consumer read."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5_000})
    consumer.assign([TopicPartition("t", 0, 0)])
    consumer.poll(1.0)  # connected; its fetch parks at the broker
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("t", value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    values: list[bytes] = []
    until = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < until:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


async def test_a_real_node_survives_a_failing_poll_and_serves_clients(tmp_path):
    node = in_process_node(tmp_path, "pollfail")
    failing = FailingGroup()
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(60):
            await create_led_topic(node, "t")
            node.state.apis._groups.insert(0, failing)  # from now on every poll of the node raises first
            values = await trio.to_thread.run_sync(_produce_and_consume, f"127.0.0.1:{node.node_config.kafka_port}")
        nursery.cancel_scope.cancel()
    assert values == [b"r%d" % i for i in range(10)]
    assert failing.polls > 0
    assert node.broker.metrics.internal_errors["poll"] == failing.polls


async def test_a_real_node_survives_a_raising_outbox_callback_and_answers_the_next_request(tmp_path):
    """The callback given another broker's answer (here the node's own, over a real Kafka connection) raises:
    the node counts it (`where="outbox"`) and its next outbox request is answered as usual."""
    from tests.broker.test_outbox import api_versions_request

    node = in_process_node(tmp_path, "outboxfail")
    answers: list = []

    def raising(answer, now_ms):
        raise RuntimeError("planted: this answer's callback fails")

    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(30):
            while node.broker.broker_endpoint(1) is None:
                await trio.sleep(0.05)
            node.broker.send_to_broker(1, ApiKey.API_VERSIONS, 3, api_versions_request(), raising,
                                       node.state.broker_clock_ms())
            node._process()
            while not node.broker.metrics.internal_errors["outbox"]:
                await trio.sleep(0.05)
            node.broker.send_to_broker(1, ApiKey.API_VERSIONS, 3, api_versions_request(),
                                       lambda answer, now_ms: answers.append(answer), node.state.broker_clock_ms())
            node._process()
            while not answers:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert answers[0].error_code == ErrorCode.NONE
    assert node.broker.metrics.internal_errors["outbox"] == 1


def test_a_raising_controller_call_callback_is_a_failure_the_broker_survives():
    from broker.core import ControllerCall

    cluster = Cluster()
    broker = cluster.brokers[1]

    def raising(response, now_ms):
        raise RuntimeError("planted: this controller answer's callback fails")

    broker.on_controller_response(ControllerCall(1, CreateTopicsRequest(topics=()), raising), object(), cluster.now_ms)
    assert [(f.where, f.subject) for f in broker.take_failures()] == [("controller_call", "CreateTopicsRequest")]

"""Broker-only nodes (KRaft observers) follow the metadata log through a controller's answers: entries in
order, a snapshot when they are behind what the controller still holds, their progress in the quorum status,
and the initial load applied to the broker as one delta once their own registration is replayed."""

from __future__ import annotations

import random

from broker.config import parse_config
from broker.controller_core import encode_entry
from broker.node_state import METADATA_FETCH_WAIT_MS_MAX, NodeState
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from simulations.disk import SimDisk

CONFIG = parse_config({
    "cluster_id": "observers",
    "nodes": [{"id": 1, "kafka_port": 9001, "controller_port": 9101, "roles": ["broker", "controller"]},
              {"id": 4, "kafka_port": 9004, "roles": ["broker"]}],
    "topic_defaults": {"partitions": 1, "replication_factor": 1, "min_insync_replicas": 1},
}, "<test>", "/")
OBSERVER_INCARNATION = b"\x04" * 16
TOPIC_ID = bytes(range(16))


def node(node_id: int, incarnation: bytes, clock_ms=lambda: 0) -> NodeState:
    def disk():
        storage = SimDisk(random.Random(node_id))
        storage.makedirs("metadata")
        storage.makedirs("logs")
        return storage

    return NodeState(CONFIG, node_id, disk(), random.Random(node_id), clock_ms, incarnation_id=incarnation)


def commit(controller: NodeState, index: int, records: list) -> None:
    controller.controller_core.on_committed(index, encode_entry(1, records))


def registration(broker_id: int, incarnation: bytes, epoch: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id, incarnation, epoch, "127.0.0.1", 9000 + broker_id, None, ("broker",), True)


def history(controller: NodeState) -> None:
    commit(controller, 1, [registration(1, b"\x01" * 16, 1)])
    commit(controller, 2, [TopicRecord("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (4,), (4,), 4)])
    commit(controller, 3, [registration(4, OBSERVER_INCARNATION, 3)])


def test_an_observer_replays_the_entries_and_its_broker_gets_them_as_one_delta():
    controller, observer = node(1, b"\x01" * 16), node(4, OBSERVER_INCARNATION)
    assert observer.raft is None and observer.is_observer and not controller.is_observer
    commit(controller, 1, [registration(1, b"\x01" * 16, 1)])
    commit(controller, 2, [TopicRecord("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (4,), (4,), 4)])
    assert observer.apply_metadata_fetch(controller.metadata_fetch_answer({"from": 1, "node_id": 4}, 50)) == 2
    assert observer.metadata_image.topics.by_name["t"].partitions[0].leader == 4
    assert observer.broker.partitions == {}  # history only: the broker waits for its own registration
    commit(controller, 3, [registration(4, OBSERVER_INCARNATION, 3)])
    answer = controller.metadata_fetch_answer({"from": 3, "node_id": 4}, 80)
    assert [entry[0] for entry in answer["entries"]] == [3] and answer["snapshot"] is None
    assert observer.apply_metadata_fetch(answer) == 1
    assert list(observer.broker.partitions) == [("t", 0)]  # now applied, in one delta
    assert observer.controller.image().provenance.raft_index == 3
    status = controller.handle_admin({"kind": "quorum_status"}, 100)["status"]
    assert status["observers"] == [{"id": 4, "last_index": 2, "lag": max(0, status["commit_index"] - 2),
                                    "last_contact_ms": 20}]
    assert controller.metadata_fetch_answer({"from": 4, "node_id": 4}, 90)["entries"] == []


def test_an_observer_behind_what_the_controller_holds_gets_a_snapshot():
    controller, observer = node(1, b"\x01" * 16), node(4, OBSERVER_INCARNATION)
    history(controller)
    controller.metadata_log[:] = controller.metadata_log[2:]  # as if the older entries left its window
    answer = controller.metadata_fetch_answer({"from": 1, "node_id": 4}, 0)
    assert answer["snapshot"] is not None and answer["snapshot"][0] == 3 and answer["entries"] == []
    assert observer.apply_metadata_fetch(answer) == 1
    assert observer.metadata_image.provenance.raft_index == 3
    assert observer.metadata_image.topics == controller.metadata_image.topics
    assert list(observer.broker.partitions) == [("t", 0)]
    assert observer.apply_metadata_fetch(answer) == 0  # an old snapshot again changes nothing


def test_an_observer_names_the_quorum_as_the_controllers_told_it():
    controller, observer = node(1, b"\x01" * 16), node(4, OBSERVER_INCARNATION)
    history(controller)
    observer.apply_metadata_fetch(controller.metadata_fetch_answer({"from": 1, "node_id": 4}, 0))
    status = observer.handle_admin({"kind": "quorum_status"}, 0)["status"]
    assert [o["id"] for o in status["observers"]] == [4]
    assert status["observers"][0]["last_index"] == 3


def test_clients_are_told_of_the_broker_they_asked_as_the_controller_whatever_leader_it_knows():
    """Never -1 and never the quorum leader, which may have just died (Kafka's KRaft brokers name a live
    broker): this node forwards what it is sent once a leader is known, and answers once its image has it."""
    controller, observer = node(1, b"\x01" * 16), node(4, OBSERVER_INCARNATION)
    assert observer.quorum_leader_id() is None and observer.controller_id_for_clients() == 4
    assert controller.quorum_leader_id() is None and controller.controller_id_for_clients() == 1
    observer.leader_hint = 1  # the quorum leader is a broker too, and perhaps dead already
    assert observer.controller_id_for_clients() == 4


def elected(controller: NodeState, clock: list[int]) -> None:
    while controller.quorum_leader_id() != controller.node_id:
        clock[0] += 50
        controller.raft.tick(clock[0])
        controller.step(clock[0])
        assert clock[0] < 10_000, "the single voter did not elect itself"


def test_the_quorum_leader_holds_a_fetch_with_nothing_new_until_an_entry_is_committed():
    # Kafka's observers long-poll the leader's Raft Fetch: no polling while nothing changes.
    clock = [0]
    controller = node(1, b"\x01" * 16, lambda: clock[0])
    observer = node(4, OBSERVER_INCARNATION)
    request = observer.metadata_fetch_request()
    start = observer.metadata_image.provenance.raft_index + 1
    assert request == {"node_id": 4, "from": start, "wait_ms": METADATA_FETCH_WAIT_MS_MAX}
    assert controller.metadata_fetch_hold_ms(request, 0) == 0  # no leader yet: answered at once, naming none
    elected(controller, clock)
    caught_up = {**request, "from": controller.metadata_news()[0] + 1}
    assert controller.metadata_fetch_hold_ms(request, clock[0]) == 0  # entries to send: at once
    assert controller.metadata_fetch_hold_ms(caught_up, clock[0]) == METADATA_FETCH_WAIT_MS_MAX
    assert controller.metadata_fetch_hold_ms({**caught_up, "wait_ms": 60_000}, clock[0]) == METADATA_FETCH_WAIT_MS_MAX
    assert controller.metadata_fetch_hold_ms({**caught_up, "wait_ms": 120}, clock[0]) == 120
    assert controller.metadata_fetch_hold_ms({"node_id": 4, "from": caught_up["from"]}, clock[0]) == 0  # older release
    news = controller.metadata_news()
    index = news[0] + 1
    commit(controller, index, [registration(4, OBSERVER_INCARNATION, 3)])
    assert controller.metadata_news() == (index, 1) != news  # what wakes the held fetch
    answer = controller.metadata_fetch_answer(caught_up, clock[0], held=True)
    assert [entry[0] for entry in answer["entries"]] == [index] and answer["held"]
    applied = observer.apply_metadata_fetch(answer)
    assert observer.metadata_fetch_again_at_once(answer, applied)


def test_an_observer_waits_its_interval_after_an_answer_nobody_held():
    controller, observer = node(1, b"\x01" * 16), node(4, OBSERVER_INCARNATION)
    history(controller)
    answer = controller.metadata_fetch_answer({"from": 1, "node_id": 4}, 0)
    assert observer.metadata_fetch_again_at_once(answer, observer.apply_metadata_fetch(answer))  # entries came
    empty = controller.metadata_fetch_answer(observer.metadata_fetch_request(), 10)
    assert empty["entries"] == [] and not empty["held"]
    assert not observer.metadata_fetch_again_at_once(empty, observer.apply_metadata_fetch(empty))
    assert observer.metadata_fetch_again_at_once({**empty, "held": True}, 0)  # the wait was at the leader
    assert not observer.metadata_fetch_again_at_once({"entries": []}, 0)  # an earlier release's answer

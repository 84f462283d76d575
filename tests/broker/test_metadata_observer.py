"""A broker-only node's fetches of the metadata log (broker/metadata_observer.py), sans-IO: one fetch in flight
at the controller the node knows (in turn while it knows none), the next at once after an answer that brought
entries or that the leader held and after the poll interval otherwise, a failed fetch (timeout, lost connection,
error answer) forgetting the leader and tried again after the backoff, a late answer dropped, and a fetch at once
when a controller call's answer needs the metadata. The same class runs in net/node.py and the simulator; this
drives it with real NodeStates (a controller answering, an observer replaying) and a port that records what it
was asked to do on a clock the test moves."""

from __future__ import annotations

import random

from broker.config import parse_config
from broker.controller_calls import CONTROLLER_RETRY_BACKOFF_MS
from broker.controller_core import encode_entry
from broker.metadata_observer import OBSERVER_FETCH_INTERVAL_MS, MetadataObserver
from broker.node_state import NodeState
from metadata.records import RegisterBrokerRecord, TopicRecord
from simulations.disk import SimDisk

CONFIG = parse_config({
    "cluster_id": "observer",
    "nodes": [{"id": 1, "kafka_port": 9001, "controller_port": 9101, "roles": ["broker", "controller"]},
              {"id": 2, "kafka_port": 9002, "controller_port": 9102, "roles": ["broker", "controller"]},
              {"id": 4, "kafka_port": 9004, "roles": ["broker"]}],
}, "<test>", "/")
TIMEOUT_MS = 2_000


class RecordingPort:
    """The runtime's side: fetches sent, timers due on the test's clock (cancelled ones never fire)."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.sent: list[tuple[int, dict]] = []
        self.timers: dict[int, tuple[int, object]] = {}  # handle -> (due ms, action)
        self.handles = 0
        self.applied_count = 0
        self.unreachable: set[int] = set()
        self.refuse = False

    def reachable(self, node_id: int) -> bool:
        return node_id not in self.unreachable

    def send_fetch(self, target: int, request: dict) -> bool:
        if self.refuse:
            return False
        self.sent.append((target, request))
        return True

    def call_later(self, delay_ms: int, action) -> int:
        self.handles += 1
        self.timers[self.handles] = (self.now_ms + delay_ms, action)
        return self.handles

    def cancel(self, handle: int) -> None:
        self.timers.pop(handle, None)

    def applied(self) -> None:
        self.applied_count += 1

    def due_in(self) -> list[int]:
        return sorted(due - self.now_ms for due, _ in self.timers.values())

    def advance(self, delay_ms: int) -> None:
        """Move the clock, running the timers that fall due, in order."""
        end_ms = self.now_ms + delay_ms
        while True:
            due = sorted((when, handle) for handle, (when, _) in self.timers.items() if when <= end_ms)
            if not due:
                break
            when, handle = due[0]
            _, action = self.timers.pop(handle)
            self.now_ms = when
            action()
        self.now_ms = end_ms


def node(node_id: int) -> NodeState:
    storage = SimDisk(random.Random(node_id))
    storage.makedirs("metadata")
    storage.makedirs("logs")
    return NodeState(CONFIG, node_id, storage, random.Random(node_id), lambda: 0,
                     incarnation_id=bytes([node_id]) * 16)


def answer_of(controller: NodeState, request: dict, now_ms: int) -> dict:
    """The controller's answer, naming it the quorum leader (this one never ran an election)."""
    return {**controller.metadata_fetch_answer(request, now_ms), "leader": controller.node_id}


def observing() -> tuple[NodeState, NodeState, RecordingPort, MetadataObserver]:
    controller, observer_state = node(1), node(4)
    controller.controller_core.on_committed(1, encode_entry(1, [RegisterBrokerRecord(
        1, b"\x01" * 16, 1, "127.0.0.1", 9001, None, ("broker",), True)]))
    controller.controller_core.on_committed(2, encode_entry(1, [TopicRecord("t", bytes(range(16)))]))
    port = RecordingPort()
    return controller, observer_state, port, MetadataObserver(observer_state, port, TIMEOUT_MS)


def test_one_fetch_in_flight_then_the_next_at_once_after_entries_and_after_the_interval_after_nothing():
    controller, state, port, observer = observing()
    observer.fetch()
    observer.fetch()  # one in flight: nothing more leaves
    assert [(target, request["from"]) for target, request in port.sent] == [(1, 0)]
    assert observer.asked == 1 and observer.fetch_id == 1 and port.due_in() == [TIMEOUT_MS]
    observer.on_answer(1, answer_of(controller, port.sent[0][1], 0))
    assert state.metadata_image.provenance.raft_index == 2 and port.applied_count == 1
    assert observer.asked is None and port.due_in() == [0]  # entries came: at once (the timeout cancelled)
    port.advance(0)
    assert [request["from"] for _, request in port.sent] == [0, 3]
    observer.on_answer(1, answer_of(controller, port.sent[1][1], 0))  # nothing new, not held
    assert port.due_in() == [OBSERVER_FETCH_INTERVAL_MS]
    port.advance(OBSERVER_FETCH_INTERVAL_MS - 1)
    assert len(port.sent) == 2
    port.advance(1)
    assert len(port.sent) == 3
    observer.on_answer(1, {**answer_of(controller, port.sent[2][1], 0), "held": True})
    assert port.due_in() == [0]  # the leader held it: the wait was there


def test_an_answer_from_another_controller_than_the_one_asked_is_dropped():
    controller, state, port, observer = observing()
    observer.fetch()
    observer.on_answer(2, answer_of(controller, port.sent[0][1], 0))
    assert state.metadata_image.provenance.raft_index == -1 and port.applied_count == 0 and observer.asked == 1


def test_a_fetch_without_an_answer_forgets_the_leader_and_asks_the_next_controller_after_the_backoff():
    controller, state, port, observer = observing()
    state.leader_hint = 1  # as if an answer had named node 1 the leader
    observer.fetch()
    assert port.sent[-1][0] == 1
    port.advance(TIMEOUT_MS)  # no answer
    assert observer.asked is None and state.leader_hint is None and port.due_in() == [CONTROLLER_RETRY_BACKOFF_MS]
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [target for target, _ in port.sent] == [1, 1]  # no leader known: the controllers in turn, from the first
    port.advance(TIMEOUT_MS + CONTROLLER_RETRY_BACKOFF_MS)
    assert [target for target, _ in port.sent] == [1, 1, 2] and observer.asked == 2 and observer.fetch_id == 3
    observer.on_answer(1, answer_of(controller, port.sent[1][1], 0))  # node 1, late
    assert port.applied_count == 0 and observer.asked == 2


def test_a_lost_connection_or_an_error_answer_fails_the_fetch_and_a_connection_elsewhere_does_not():
    controller, state, port, observer = observing()
    observer.fetch()
    observer.on_connection_lost(2)
    assert observer.asked == 1
    observer.on_connection_lost(1)
    assert observer.asked is None and port.due_in() == [CONTROLLER_RETRY_BACKOFF_MS]
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    target = observer.asked
    state.leader_hint = target
    observer.on_answer(target, {"error": 41, "message": "bad metadata fetch"})
    assert observer.asked is None and state.leader_hint is None and port.applied_count == 0
    assert port.due_in() == [CONTROLLER_RETRY_BACKOFF_MS]


def test_the_leader_named_is_asked_while_it_can_be_reached_and_the_controllers_in_turn_while_not():
    controller, state, port, observer = observing()
    state.leader_hint = 2
    observer.fetch()
    assert observer.asked == 2
    port.unreachable = {2}  # its connection is gone
    observer.on_connection_lost(2)  # forgets the leader
    state.leader_hint = 2  # an answer elsewhere named it again, but it cannot be reached
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [target for target, _ in port.sent] == [2, 1]


def test_a_fetch_that_cannot_leave_is_tried_again_after_the_backoff():
    controller, state, port, observer = observing()
    port.refuse = True
    observer.fetch()
    assert observer.asked is None and port.sent == [] and port.due_in() == [CONTROLLER_RETRY_BACKOFF_MS]
    port.refuse = False
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert port.sent == [(2, port.sent[0][1])] and observer.asked == 2  # no leader known: the next controller


def test_fetch_now_sends_at_once_or_makes_the_fetch_in_flight_be_followed_at_once():
    controller, state, port, observer = observing()
    observer.fetch()
    observer.on_answer(1, answer_of(controller, port.sent[0][1], 0))
    port.advance(0)
    observer.fetch_now()  # in flight: nothing more leaves now
    assert len(port.sent) == 2
    observer.on_answer(1, answer_of(controller, port.sent[1][1], 0))  # nothing new, not held
    assert port.due_in() == [0]  # but the node waits for metadata: at once
    port.advance(0)
    observer.on_answer(1, answer_of(controller, port.sent[2][1], 0))
    assert port.due_in() == [OBSERVER_FETCH_INTERVAL_MS]  # wanted once, not for good
    observer.fetch_now()  # nothing in flight: one leaves at once
    assert len(port.sent) == 4 and observer.asked == 1
    assert port.due_in() == [TIMEOUT_MS]  # the fetch planned for after the interval does not go too
    observer.on_answer(1, answer_of(controller, port.sent[3][1], 0))
    port.advance(OBSERVER_FETCH_INTERVAL_MS)
    assert len(port.sent) == 5  # one fetch per interval, not two


def test_close_cancels_the_timeout_of_the_fetch_in_flight_and_the_next_fetch_planned():
    controller, state, port, observer = observing()
    observer.fetch()
    observer.close()
    port.advance(TIMEOUT_MS * 2)
    assert observer.asked == 1 and state.leader_hint is None and port.timers == {}
    controller, state, port, observer = observing()
    observer.fetch()
    observer.on_answer(1, answer_of(controller, port.sent[0][1], 0))
    observer.close()
    port.advance(OBSERVER_FETCH_INTERVAL_MS * 2)
    assert len(port.sent) == 1 and port.timers == {}


def test_planted_stops_after_failure_plans_no_fetch_after_a_failed_one():
    controller, state, port, observer = observing()
    observer.bug_stops_after_failure = True
    observer.fetch()
    port.advance(TIMEOUT_MS)  # no answer
    assert observer.asked is None and port.timers == {}  # nothing planned: the image stays where it is
    port.advance(CONTROLLER_RETRY_BACKOFF_MS * 10)
    assert len(port.sent) == 1
    observer.fetch_now()  # only a controller call's answer would revive it
    assert len(port.sent) == 2

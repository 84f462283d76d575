"""A node's controller calls (broker/controller_calls.py), sans-IO, on a broker-only node (a KRaft observer) of
two controllers: the attempt goes to the controller the node knows (in turn while it knows none), retriable
failures try again after the backoff until the call's timeout, an error answer naming the leader is followed,
an attempt at a controller that moved or stays silent is given up, and the answer reaches the broker with the
controller's applied index. The same class runs in net/node.py and the simulator; this drives it with a port
that records what it was asked to do and a clock the test moves."""

from __future__ import annotations

import random

import cbor2

from broker.config import parse_config
from broker.controller_calls import (
    CONTROLLER_CALL_TIMEOUT_MS,
    CONTROLLER_RETRY_BACKOFF_MS,
    ControllerCalls,
    ControllerRpc,
    controller_reply,
    refuse_unless_leading,
)
from broker.controller_core import ControllerOutcome
from broker.core import ControllerCall
from broker.node_state import NodeState
from metadata.requests import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from partitions.errors import ErrorCode, KafkaError
from simulations.disk import SimDisk

CONFIG = parse_config({
    "cluster_id": "calls",
    "nodes": [{"id": 1, "kafka_port": 9001, "controller_port": 9101, "roles": ["broker", "controller"]},
              {"id": 2, "kafka_port": 9002, "controller_port": 9102, "roles": ["broker", "controller"]},
              {"id": 4, "kafka_port": 9004, "roles": ["broker"]}],
}, "<test>", "/")
REQUEST = CreateTopicsRequest(topics=(CreatableTopic(name="t", num_partitions=1, replication_factor=1),))


class RecordingPort:
    """The runtime's side: RPCs sent and abandoned, timers due on the test's clock."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.sent: list[ControllerRpc] = []
        self.abandoned: list[int] = []
        self.timers: list[tuple[int, int, object]] = []  # (due ms, order, action)
        self.answers = 0
        self.unreachable: set[int] = set()

    def reachable(self, node_id: int) -> bool:
        return node_id not in self.unreachable

    def send_rpc(self, rpc: ControllerRpc) -> bool:
        self.sent.append(rpc)
        return True

    def abandon_rpc(self, rpc_id: int) -> None:
        self.abandoned.append(rpc_id)

    def call_later(self, delay_ms: int, action) -> None:
        self.timers.append((self.now_ms + delay_ms, len(self.timers), action))

    def step_soon(self) -> None:
        pass

    def answered(self, fetch_metadata_now: bool) -> None:
        self.answers += 1
        self.fetch_metadata_now = fetch_metadata_now

    def advance(self, delay_ms: int) -> None:
        """Move the clock, running the timers that fall due, in order."""
        end_ms = self.now_ms + delay_ms
        while True:
            due = sorted(timer for timer in self.timers if timer[0] <= end_ms)
            if not due:
                break
            self.timers.remove(due[0])
            self.now_ms = due[0][0]
            due[0][2]()
        self.now_ms = end_ms


def observer_calls() -> tuple[NodeState, RecordingPort, ControllerCalls, list]:
    port = RecordingPort()
    storage = SimDisk(random.Random(4))
    storage.makedirs("metadata")
    storage.makedirs("logs")
    state = NodeState(CONFIG, 4, storage, random.Random(4), lambda: port.now_ms, incarnation_id=b"\x04" * 16)
    answers: list = []
    calls = ControllerCalls(state, port)
    calls.start(ControllerCall(1, REQUEST, lambda response, now_ms: answers.append((response, now_ms))))
    return state, port, calls, answers


def test_an_observer_that_knows_no_leader_asks_the_controllers_in_turn_and_follows_the_leader_named():
    state, port, calls, answers = observer_calls()
    assert [rpc.target for rpc in port.sent] == [1] and port.sent[0].request is REQUEST
    assert port.sent[0].timeout_ms == CONTROLLER_CALL_TIMEOUT_MS
    calls.on_rpc_answer(port.sent[0].rpc_id, None, KafkaError("not the controller", ErrorCode.NOT_CONTROLLER), None)
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [rpc.target for rpc in port.sent] == [1, 2]  # no leader named: the next controller
    calls.on_rpc_answer(port.sent[1].rpc_id, None, KafkaError("not the controller", ErrorCode.NOT_CONTROLLER), 1)
    assert state.leader_hint == 1
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [rpc.target for rpc in port.sent] == [1, 2, 1]  # the leader named
    assert answers == [] and calls.in_flight == 1


def test_the_answer_reaches_the_broker_with_the_controllers_applied_index_and_a_late_one_is_dropped():
    state, port, calls, answers = observer_calls()
    rpc = port.sent[0]
    port.advance(7)
    calls.on_rpc_answer(rpc.rpc_id, "created", None, None, 42)
    assert answers == [("created", 7)] and port.answers == 1 and calls.in_flight == 0
    assert not port.fetch_metadata_now  # the broker's own call: nothing waits for the image
    calls.on_rpc_answer(rpc.rpc_id, "again", None, None, 43)  # a duplicate: no attempt waits for it
    assert answers == [("created", 7)]


def test_an_observer_holding_a_forwarded_answer_for_its_image_is_told_to_fetch_the_metadata_now():
    state, port, calls, answers = observer_calls()
    calls.start(ControllerCall(2, REQUEST, lambda response, now_ms: answers.append(response), read_your_write=True))
    calls.on_rpc_answer(port.sent[-1].rpc_id, "created", None, None, 42)
    assert answers == [] and state.broker.awaiting_image  # held until this broker's image reaches index 42
    assert port.fetch_metadata_now


def carried(reply: dict) -> dict:
    """The reply as the controller port carries it in both runtimes: CBOR there and back."""
    return cbor2.loads(cbor2.dumps(reply))


def test_the_reply_both_runtimes_carry_gives_the_error_with_the_leader_named_and_the_response_with_its_index():
    state, port, calls, answers = observer_calls()
    refused = ControllerOutcome(-1, error=KafkaError("not the controller", ErrorCode.NOT_CONTROLLER), leader_hint=2)
    calls.on_rpc_reply(port.sent[0].rpc_id, carried(controller_reply(refused)))
    assert state.leader_hint == 2 and answers == []  # retriable, and the leader named is followed
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [rpc.target for rpc in port.sent] == [1, 2]
    response = CreateTopicsResponse(topics=())
    calls.start(ControllerCall(2, REQUEST, lambda response, now_ms: answers.append(response), read_your_write=True))
    calls.on_rpc_reply(port.sent[-1].rpc_id, carried(controller_reply(ControllerOutcome(7, response, applied_index=42))))
    assert [held[0] for held in state.broker._awaiting_image] == [42]  # until this broker's image reaches it
    calls.on_rpc_reply(port.sent[1].rpc_id, carried(controller_reply(ControllerOutcome(8, response))))
    assert answers == [(response, CONTROLLER_RETRY_BACKOFF_MS)]
    calls.start(ControllerCall(4, REQUEST, lambda response, now_ms: answers.append(response), read_your_write=True))
    calls.on_rpc_reply(port.sent[-1].rpc_id, {"response": controller_reply(ControllerOutcome(9, response))["response"]})
    assert [held[0] for held in state.broker._awaiting_image] == [42, 0]  # an earlier release's reply: no index, 0
    refused = ControllerOutcome(-1, error=KafkaError("topic exists", ErrorCode.TOPIC_ALREADY_EXISTS))
    calls.start(ControllerCall(3, REQUEST, lambda response, now_ms: answers.append(response)))
    calls.on_rpc_reply(port.sent[-1].rpc_id, carried(controller_reply(refused)))
    assert answers[-1].code == ErrorCode.TOPIC_ALREADY_EXISTS and answers[-1].message == "topic exists"


def test_a_reply_this_node_cannot_read_fails_the_attempt_which_is_retried_until_the_calls_timeout():
    state, port, calls, answers = observer_calls()
    for reply in ({"error": 9999, "message": "from a newer release"}, {"response": b"\xff\x00garbage"}, {},
                  {"response": controller_reply(ControllerOutcome(1, CreateTopicsResponse(topics=())))["response"],
                   "applied_index": "many"}, None):
        calls.on_rpc_reply(port.sent[-1].rpc_id, reply)
        assert answers == []  # no exception out of the class: the node goes on, the call waits for a retry
        port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert len(port.sent) == 6  # each failed attempt was tried again
    port.advance(CONTROLLER_CALL_TIMEOUT_MS)
    calls.on_rpc_reply(port.sent[-1].rpc_id, {"error": "NOT_CONTROLLER"})
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)  # past the call's timeout: answered with the last failure
    assert len(answers) == 1 and answers[0][0].code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "unreadable controller answer" in answers[0][0].message


def test_a_controllers_own_error_ends_the_call_at_once():
    state, port, calls, answers = observer_calls()
    refused = KafkaError("topic exists", ErrorCode.TOPIC_ALREADY_EXISTS)
    calls.on_rpc_answer(port.sent[0].rpc_id, None, refused, None)
    port.advance(CONTROLLER_CALL_TIMEOUT_MS)
    assert answers == [(refused, 0)] and len(port.sent) == 1  # answered, never asked again


def test_retriable_failures_are_retried_until_the_calls_timeout_then_answered_with_the_last_one():
    state, port, calls, answers = observer_calls()
    while not answers:
        assert port.now_ms < CONTROLLER_CALL_TIMEOUT_MS + CONTROLLER_RETRY_BACKOFF_MS, "the call never ended"
        rpc = port.sent[-1]
        assert rpc.timeout_ms == max(50, CONTROLLER_CALL_TIMEOUT_MS - port.now_ms)  # what is left of the call
        calls.on_rpc_failed(rpc.rpc_id, KafkaError(f"refused at {port.now_ms}", ErrorCode.REQUEST_TIMED_OUT))
        assert state.leader_hint is None  # an observer forgets the controller it could not reach
        port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    (error, answered_ms), = answers
    assert error.code == ErrorCode.REQUEST_TIMED_OUT and answered_ms == CONTROLLER_CALL_TIMEOUT_MS
    assert str(error) == f"refused at {CONTROLLER_CALL_TIMEOUT_MS - CONTROLLER_RETRY_BACKOFF_MS}"
    assert len(port.sent) == CONTROLLER_CALL_TIMEOUT_MS // CONTROLLER_RETRY_BACKOFF_MS


def test_an_unreachable_controller_is_not_sent_to_and_the_call_tries_again():
    state, port, calls, answers = observer_calls()
    calls.on_connection_lost(1)
    assert port.sent[0].target == 1 and calls.in_flight == 0
    port.unreachable = {1, 2}
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    retries = [due for due, _, _ in port.timers if due <= 2 * CONTROLLER_RETRY_BACKOFF_MS]
    assert len(port.sent) == 1 and retries == [2 * CONTROLLER_RETRY_BACKOFF_MS]  # nothing sent; another try due
    port.unreachable = set()
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert len(port.sent) == 2 and calls.in_flight == 1


def test_an_attempt_at_a_controller_that_moved_is_given_up_and_the_new_one_asked():
    state, port, calls, answers = observer_calls()
    state.leader_hint = 1
    calls.abandon_moved()
    assert port.abandoned == []  # still the controller it knows
    state.leader_hint = 2  # as a metadata fetch answer naming a new leader would
    calls.abandon_moved()
    assert port.abandoned == [port.sent[0].rpc_id] and calls.in_flight == 0
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [rpc.target for rpc in port.sent] == [1, 2]
    calls.on_rpc_answer(port.sent[0].rpc_id, "late", None, None, 1)  # the abandoned attempt's answer
    assert answers == []


def test_an_observers_attempt_at_a_silent_controller_is_given_up_after_its_share_of_the_session():
    state, port, calls, answers = observer_calls()
    state.leader_hint = 1
    attempt_ms = state.controller_attempt_ms_max()
    assert attempt_ms == max(500, CONFIG.broker.broker_session_timeout_ms // 3)
    port.advance(attempt_ms - 1)
    assert port.abandoned == []
    port.advance(1)
    assert port.abandoned == [port.sent[0].rpc_id] and state.leader_hint is None
    port.advance(CONTROLLER_RETRY_BACKOFF_MS)
    assert [rpc.target for rpc in port.sent] == [1, 2]  # the next controller


def test_planted_wait_out_moved_controller_keeps_waiting_on_the_controller_asked():
    state, port, calls, answers = observer_calls()
    calls.bug_wait_out_moved_controller = True
    state.leader_hint = 2
    calls.abandon_moved()
    assert port.abandoned == [] and calls.in_flight == 1


def test_a_controller_serves_another_nodes_request_only_while_it_leads_and_names_none_before_an_election():
    config = parse_config({
        "cluster_id": "alone",
        "nodes": [{"id": 1, "kafka_port": 9001, "controller_port": 9101, "roles": ["broker", "controller"]}],
    }, "<test>", "/")
    clock = [0]
    storage = SimDisk(random.Random(1))
    storage.makedirs("metadata")
    storage.makedirs("logs")
    controller = NodeState(config, 1, storage, random.Random(1), lambda: clock[0], incarnation_id=b"\x01" * 16)
    refusal = refuse_unless_leading(controller)
    assert refusal.error.code == ErrorCode.NOT_CONTROLLER and refusal.leader_hint is None  # no leader yet
    while controller.raft.status().leader_id != 1:
        clock[0] += 50
        controller.raft.tick(clock[0])
        controller.step(clock[0])
        assert clock[0] < 10_000, "the single voter did not elect itself"
    assert refuse_unless_leading(controller) is None


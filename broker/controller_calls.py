"""A node's calls to the active controller, sans-IO: one implementation for the real node (net/node.py) and the
simulator (simulations/node_process.py).

Theory of operation. The broker asks the controller for things (registration, heartbeats, AlterPartition, a
client's forwarded admin request); each is a `ControllerCall` (broker/core.py) taken out of a step.
`ControllerCalls` carries each from its start to its answer; the runtime only moves the bytes and keeps the
time, through a `ControllerCallPort`:
- an attempt asks the controller this node knows (`NodeState.controller_to_ask`): this node's own controller
  when it leads the quorum (the outcome comes out of a later step: `on_local_outcome`), else an RPC the runtime
  carries (`port.send_rpc`; its answer comes back through `on_rpc_reply`, a transport failure through
  `on_rpc_failed` or `on_connection_lost`);
- a retriable failure (NOT_CONTROLLER, REQUEST_TIMED_OUT, a Raft error, a lost connection) is tried again after
  CONTROLLER_RETRY_BACKOFF_MS until the call's CONTROLLER_CALL_TIMEOUT_MS is over; the call is then answered
  with its last failure;
- an attempt in flight to a controller other than the one this node now knows is given up at once
  (`abandon_moved`, after each step): a paused controller keeps its connections open, and waiting out the call's
  timeout there would cost a broker its heartbeats, so its session;
- an observer (a broker-only node) learns of a new quorum leader only from an answer: its attempt on one
  controller is given up after `NodeState.controller_attempt_ms_max`, forgetting that leader, so that it asks
  the next controller; an error answer naming the leader is followed;
- the answer goes to `BrokerCore.on_controller_response` with the controller's applied metadata index, which a
  client's forwarded request waits for (read-your-writes).
On the other side, a controller serves another node's request only while it leads the quorum
(`refuse_unless_leading`); its answer, either way, is a `ControllerOutcome` (an error names the leader it knows),
which both runtimes carry back as the same dict (`controller_reply`, read by `ControllerCalls.on_rpc_reply`).

It never sleeps, never opens a connection and never reads a clock of its own: time is `NodeState.clock_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from broker.controller_core import ControllerOutcome
from broker.core import ControllerCall
from metadata.requests import decode_response as decode_controller_response
from metadata.requests import encode_response as encode_controller_response
from partitions.errors import ErrorCode, KafkaError
from raftlog.port import RaftError

if TYPE_CHECKING:
    from broker.node_state import NodeState

CONTROLLER_CALL_TIMEOUT_MS = 10_000
CONTROLLER_RETRY_BACKOFF_MS = 100
CONTROLLER_RPC_TIMEOUT_MS_MIN = 50  # an attempt begun just before its call's timeout still gets this long
RETRIABLE_CONTROLLER_ERRORS = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})
assert CONTROLLER_RETRY_BACKOFF_MS < CONTROLLER_CALL_TIMEOUT_MS


@dataclass
class _CallState:
    call: ControllerCall
    deadline_ms: int
    last_error: KafkaError


@dataclass(frozen=True)
class ControllerRpc:
    """One attempt of a call at a remote controller, for the runtime to carry over the controller port."""

    rpc_id: int
    target: int  # the controller asked
    request: Any
    timeout_ms: int  # the transport's bound on this attempt: what is left of the call's timeout


class ControllerCallPort(Protocol):
    """What a runtime does for `ControllerCalls`."""

    def reachable(self, node_id: int) -> bool:
        """Whether an RPC to `node_id` can be sent now (the simulator: a connection to it is open)."""

    def send_rpc(self, rpc: ControllerRpc) -> bool:
        """Send the attempt; False when it could not be sent."""

    def abandon_rpc(self, rpc_id: int) -> None:
        """The attempt is given up: stop carrying it (an answer to it is ignored anyway)."""

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> None:
        """Run `action` after `delay_ms` on the node's clock, then step the node."""

    def step_soon(self) -> None:
        """Step the node soon (a request was queued for the local controller, a call was answered)."""

    def answered(self, fetch_metadata_now: bool) -> None:
        """A call was handed its answer (BrokerCore.on_controller_response). `fetch_metadata_now`: this is an
        observer whose broker holds an answer for its image (`BrokerCore.awaiting_image`), so it fetches the
        metadata now rather than at its next poll."""


def refuse_unless_leading(state: NodeState) -> ControllerOutcome | None:
    """Another node's controller request, arriving here: None when this node leads the quorum (submit it), else
    the NOT_CONTROLLER outcome to answer, naming the leader this node knows."""
    leader_id = state.raft.status().leader_id
    if leader_id == state.node_id:
        return None
    return ControllerOutcome(-1, error=KafkaError("not the controller", ErrorCode.NOT_CONTROLLER), leader_hint=leader_id)


def controller_reply(outcome: ControllerOutcome) -> dict:
    """A controller's answer to another node's call, as the controller port carries it (CBOR in both runtimes):
    the encoded response with the controller's applied metadata index, or the error with the leader it knows."""
    if outcome.error is not None:
        return {"error": int(outcome.error.code), "message": outcome.error.message, "leader": outcome.leader_hint}
    return {"response": encode_controller_response(outcome.response), "applied_index": outcome.applied_index}


class ControllerCalls:
    """The controller calls of one node (see the module docstring)."""

    def __init__(self, state: NodeState, port: ControllerCallPort) -> None:
        self._state = state
        self._port = port
        self._next_rpc_id = 0
        self._remote: dict[int, tuple[_CallState, int]] = {}  # rpc id -> call, controller asked
        self._local: dict[int, _CallState] = {}  # the local controller's operation id -> call
        # Planted bug (the simulator's wait_out_moved_controller): an attempt waits on the controller it asked
        # even after this node knows another, and an observer's attempt never gives up.
        self.bug_wait_out_moved_controller = False

    @property
    def in_flight(self) -> int:
        """Attempts waiting for an answer, here or at a remote controller."""
        return len(self._remote) + len(self._local)

    def start(self, call: ControllerCall) -> None:
        now_ms = self._state.clock_ms()
        self._attempt(_CallState(call, now_ms + CONTROLLER_CALL_TIMEOUT_MS,
                                 KafkaError("no active controller", ErrorCode.NOT_CONTROLLER)))

    def _attempt(self, call_state: _CallState) -> None:
        state = self._state
        now_ms = state.clock_ms()
        if now_ms >= call_state.deadline_ms:
            self._finish(call_state, call_state.last_error)
            return
        leader_id = state.controller_to_ask()
        if leader_id == state.node_id:
            operation_id = state.submit_controller_request(call_state.call.request, now_ms)
            self._local[operation_id] = call_state
            self._port.step_soon()
            return
        if leader_id is not None and self._port.reachable(leader_id):
            self._next_rpc_id += 1
            rpc_id = self._next_rpc_id
            timeout_ms = max(CONTROLLER_RPC_TIMEOUT_MS_MIN, call_state.deadline_ms - now_ms)
            if self._port.send_rpc(ControllerRpc(rpc_id, leader_id, call_state.call.request, timeout_ms)):
                self._remote[rpc_id] = (call_state, leader_id)
                attempt_ms = state.controller_attempt_ms_max()
                if attempt_ms is not None and not self.bug_wait_out_moved_controller:
                    self._port.call_later(attempt_ms, lambda: self._observer_attempt_timeout(rpc_id))
                return
        self._retry(call_state, call_state.last_error)

    def abandon_moved(self) -> None:
        """After each step: give up the attempts in flight to a controller other than the one this node now
        knows (NodeState.controller_moved); each asks again after the backoff."""
        if not self._remote or self.bug_wait_out_moved_controller:
            return
        for rpc_id in sorted(self._remote):
            call_state, target = self._remote[rpc_id]
            if self._state.controller_moved(target):
                del self._remote[rpc_id]
                self._port.abandon_rpc(rpc_id)
                self._retry(call_state, KafkaError(f"controller {target} moved", ErrorCode.NOT_CONTROLLER))

    def _observer_attempt_timeout(self, rpc_id: int) -> None:
        entry = self._remote.pop(rpc_id, None)
        if entry is not None:
            self._state.leader_hint = None  # ask the next controller
            self._port.abandon_rpc(rpc_id)
            self._retry(entry[0], KafkaError(f"controller {entry[1]} silent", ErrorCode.NOT_CONTROLLER))

    def _retry(self, call_state: _CallState, error: KafkaError) -> None:
        call_state.last_error = error
        self._port.call_later(CONTROLLER_RETRY_BACKOFF_MS, lambda: self._attempt(call_state))

    def on_local_outcome(self, outcome: ControllerOutcome) -> bool:
        """The local controller's outcome of an attempt made here; False when it is not one (a remote node's
        request that this controller served)."""
        call_state = self._local.pop(outcome.operation_id, None)
        if call_state is None:
            return False
        self._answer(call_state, outcome.response, outcome.error, outcome.applied_index)
        return True

    def on_rpc_reply(self, rpc_id: int, reply: dict) -> None:
        """A remote controller's answer as the controller port carried it (`controller_reply`). A controller of an
        earlier release that sends no applied index counts as 0 (no wait for it). A reply this node cannot read
        (an error code it does not know, a response it cannot decode) fails the attempt, which is retried until
        the call's timeout and then answered with that failure: the node goes on."""
        try:
            if "error" in reply:
                error = KafkaError(str(reply.get("message", "")), ErrorCode(reply["error"]))
                response, leader_hint, applied_index = None, reply.get("leader"), 0
            else:
                error, leader_hint = None, None
                response = decode_controller_response(reply["response"])
                applied_index = int(reply.get("applied_index", 0))
        except (KafkaError, KeyError, TypeError, ValueError) as failure:
            detail = failure.message if isinstance(failure, KafkaError) else repr(failure)
            self.on_rpc_failed(rpc_id, KafkaError(f"unreadable controller answer: {detail}", ErrorCode.UNKNOWN_SERVER_ERROR))
            return
        self.on_rpc_answer(rpc_id, response, error, leader_hint, applied_index)

    def on_rpc_answer(self, rpc_id: int, response: Any, error: KafkaError | None, leader_hint: Any = None,
                      applied_index: int = 0) -> None:
        """A remote controller's answer: its response, or its error with the leader it knows (followed by an
        observer; None when it names none). An answer to an attempt given up is ignored."""
        entry = self._remote.pop(rpc_id, None)
        if entry is None:
            return
        if error is not None and self._state.raft is None:
            self._state.leader_hint = leader_hint if isinstance(leader_hint, int) else None
        self._answer(entry[0], response, error, applied_index)

    def on_rpc_failed(self, rpc_id: int, error: KafkaError) -> None:
        """The runtime could not carry the attempt (refused, reset, timed out): retried; an observer forgets the
        leader it asked, to ask the next controller."""
        entry = self._remote.pop(rpc_id, None)
        if entry is None:
            return
        if self._state.raft is None:
            self._state.leader_hint = None
        self._retry(entry[0], error)

    def on_connection_lost(self, peer_id: int) -> None:
        """The connection to `peer_id` is gone with the attempts it carried (the simulator's one connection per
        peer): each is retried. The leader an observer knows is left to its metadata fetch on that connection,
        which fails with it."""
        for rpc_id in sorted(self._remote):
            call_state, target = self._remote[rpc_id]
            if target == peer_id:
                del self._remote[rpc_id]
                self._retry(call_state, KafkaError("controller connection lost", ErrorCode.REQUEST_TIMED_OUT))

    def _answer(self, call_state: _CallState, response: Any, error: KafkaError | None, applied_index: int) -> None:
        if error is not None and (isinstance(error, RaftError) or error.code in RETRIABLE_CONTROLLER_ERRORS):
            self._retry(call_state, error)
            return
        self._finish(call_state, error if error is not None else response, applied_index)

    def _finish(self, call_state: _CallState, response: Any, applied_index: int = 0) -> None:
        state = self._state
        state.broker.on_controller_response(call_state.call, response, state.broker_clock_ms(), applied_index)
        self._port.answered(state.raft is None and state.broker.awaiting_image)

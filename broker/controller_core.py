"""The controller's request pipeline over the Raft log (sans-IO: driven by the node or the simulator).

Theory of operation (Kafka's QuorumController, one request at a time):
1. `submit(request, now_ms)` queues a controller request (broker registration, heartbeat, CreateTopics,
   AlterPartition, ...) and returns an operation id.
2. `step(now_ms)`, on the Raft leader only, takes the next request, asks the state machine for
   `handle(request, now_ms) -> (records, response)` (which changes nothing), and proposes the records as one
   Raft entry (so a request's records commit atomically).
3. Every node feeds committed entries, in order, to `on_committed(index, entry)`, which replays them into the
   controller (the only place its state changes) and hands them to `on_records` (the node's metadata
   publisher, which builds image deltas for the broker).
4. Once the entry of the in-flight request is both committed and replayed locally, its response is released by
   `take_responses()`.
Only one request is in flight, so `handle` always sees the state that includes every earlier request: this
trades controller throughput for simplicity (Kafka pipelines speculatively; a later change may too).
A newly elected leader first commits a barrier entry of its own term and waits until it is replayed, so it
never handles a request against a state that misses committed entries (Raft's "no-op on election").
A non-leader answers NOT_CONTROLLER with the leader it knows of.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import cbor2

from metadata.image import Provenance
from metadata.records import NoOpRecord, decode_record, decode_record_batch, encode_record_batch
from partitions.errors import ErrorCode, KafkaError
from raftlog.port import NotLeaderError, RaftError, RaftLog

ENTRY_VERSION = 1
PROPOSAL_TIMEOUT_MS = 5_000
CONTROLLER_TICK_INTERVAL_MS = 250
QUEUED_REQUESTS_MAX = 10_000


def encode_entry(term: int, records: list[Any]) -> bytes:
    """One Raft entry: [version, the proposer's term, the records as one metadata record batch]. The term
    travels in the entry so every node replays the records at the same provenance (index, term)."""
    return cbor2.dumps([ENTRY_VERSION, term, encode_record_batch(records)])


class UnreadableMetadataError(Exception):
    """A committed metadata entry (or snapshot) this code cannot read: written by a later release (a record type
    or a field it does not know) or damaged. The node stops (net/node.py): replaying the rest of the log
    without it would leave its image wrong, and every node holding the entry stops at it, as Kafka's controllers
    treat a metadata fault as fatal."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def decode_records(encoded: Iterable[bytes], where: str) -> list[Any]:
    """The records of a committed entry or a snapshot as its records' bytes (what an observer fetches).
    Raises UnreadableMetadataError naming `where` for any this code cannot read."""
    try:
        return [decode_record(item) for item in encoded]
    except KafkaError as error:
        raise UnreadableMetadataError(where, error.message) from None


def decode_entry(entry: bytes) -> tuple[int, list[Any]]:
    """(term, records) of one Raft entry. Raises KafkaError(CORRUPT_MESSAGE) for anything else."""
    try:
        version, term, batch = cbor2.loads(entry)
    except Exception as error:  # cbor2 raises several unrelated types on garbage
        raise KafkaError(f"undecodable metadata entry: {error}", ErrorCode.CORRUPT_MESSAGE) from None
    if version != ENTRY_VERSION or not isinstance(term, int) or not isinstance(batch, bytes):
        raise KafkaError(f"metadata entry version {version!r} unsupported", ErrorCode.CORRUPT_MESSAGE)
    return term, decode_record_batch(batch)


@dataclass
class ControllerOutcome:
    """The answer to one submitted request: a response from the state machine, or an error."""

    operation_id: int
    response: Any = None
    error: KafkaError | None = None
    leader_hint: int | None = None
    # The controller's last applied metadata index when it answered: a broker that forwarded a client's request
    # answers the client once its own image has reached it (read-your-writes; BrokerCore.on_controller_response).
    applied_index: int = 0


@dataclass
class _InFlight:
    operation_id: int | None  # None for the election barrier and periodic ticks
    response: Any
    ticket: int
    raft_index: int | None = None


class ControllerCore:
    """Serializes controller requests through `controller.handle` -> Raft -> `controller.replay`."""

    def __init__(
        self,
        controller: Any,
        raft: RaftLog,
        on_records: Callable[[Provenance, list[Any]], None] | None = None,
    ) -> None:
        self.controller = controller
        self.raft = raft
        self.on_records = on_records
        self._now_ms = 0
        self._proposals = 0
        self._queue: collections.deque[tuple[int, Any]] = collections.deque()
        self._next_operation_id = 1
        self._in_flight: _InFlight | None = None
        self._responses: list[ControllerOutcome] = []
        self._ready_term: int | None = None  # the term whose barrier has been replayed
        self._barrier_term: int | None = None
        self._next_tick_ms = 0
        self.last_applied_index = 0

    # -- inputs ---------------------------------------------------------------------------------------------
    def submit(self, request: Any, now_ms: int) -> int:
        operation_id = self._new_operation_id()
        if len(self._queue) >= QUEUED_REQUESTS_MAX:
            self._responses.append(
                ControllerOutcome(operation_id, error=KafkaError("controller queue full", ErrorCode.REQUEST_TIMED_OUT))
            )
        else:
            self._queue.append((operation_id, request))
        return operation_id

    def answer_now(self, response: Any) -> int:
        """An operation answered without the log (a question about the quorum itself): its id, with `response`
        among the next `take_responses()`."""
        operation_id = self._new_operation_id()
        self._responses.append(ControllerOutcome(operation_id, response=response))
        return operation_id

    def refuse_now(self, leader_id: int | None) -> int:
        """An operation this node cannot answer: NOT_CONTROLLER with the leader it knows, among the next
        `take_responses()`."""
        operation_id = self._new_operation_id()
        self._responses.append(self._not_controller(operation_id, leader_id))
        return operation_id

    def _new_operation_id(self) -> int:
        operation_id = self._next_operation_id
        self._next_operation_id += 1
        return operation_id

    def on_committed(self, index: int, entry: bytes) -> None:
        """Replay one committed entry (every node, in log order, each exactly once)."""
        assert index > self.last_applied_index, f"index={index} last_applied={self.last_applied_index}"
        try:
            term, records = decode_entry(entry)
        except KafkaError as error:
            raise UnreadableMetadataError(f"metadata log entry {index}", error.message) from None
        provenance = Provenance(raft_index=index, raft_term=term)
        self.controller.replay_batch(records, provenance)
        self.last_applied_index = index
        if self.on_records is not None:
            self.on_records(provenance, records)
        self._maybe_release()

    def on_snapshot_restored(self, index: int) -> None:
        """The state machine was replaced by a snapshot up to `index` (the node loaded it)."""
        self.last_applied_index = index
        self._maybe_release()

    # -- driving ----------------------------------------------------------------------------------------------
    def step(self, now_ms: int) -> bool:
        """Advance; returns True when it proposed an entry (the Raft driver then has messages to send)."""
        self._now_ms = now_ms
        proposals = self._proposals
        self._step(now_ms)
        return self._proposals != proposals

    def _step(self, now_ms: int) -> None:
        self._collect_raft_completions()
        is_leader, term, leader_id = self.raft.leadership()
        if not is_leader:
            self._ready_term = None
            self._barrier_term = None
            self._reject_queue(leader_id)
            return
        if self._in_flight is not None:
            return
        if self._ready_term != term:
            if self._barrier_term != term:
                self._barrier_term = term
                self._propose(None, [NoOpRecord()], None, now_ms)
            return
        if self._queue:
            operation_id, request = self._queue.popleft()
            try:
                result = self.controller.handle(request, now_ms)
            except KafkaError as error:
                self._responses.append(ControllerOutcome(operation_id, error=error))
                return
            if result.records:
                self._propose(operation_id, result.records, result.response, now_ms)
            else:
                self._responses.append(ControllerOutcome(operation_id, response=result.response))
            return
        if now_ms >= self._next_tick_ms:
            self._next_tick_ms = now_ms + CONTROLLER_TICK_INTERVAL_MS
            result = self.controller.tick(now_ms)
            if result.records:
                self._propose(None, result.records, None, now_ms)

    def take_responses(self) -> list[ControllerOutcome]:
        responses, self._responses = self._responses, []
        for outcome in responses:
            outcome.applied_index = self.last_applied_index
        return responses

    @property
    def is_ready_leader(self) -> bool:
        is_leader, term, _ = self.raft.leadership()
        return is_leader and self._ready_term == term

    # -- internals --------------------------------------------------------------------------------------------
    def _propose(self, operation_id: int | None, records: list[Any], response: Any, now_ms: int) -> None:
        term = self._barrier_term if self._barrier_term is not None else self.raft.leadership()[1]
        ticket = self.raft.propose(encode_entry(term, records), now_ms + PROPOSAL_TIMEOUT_MS)
        self._proposals += 1
        self._in_flight = _InFlight(operation_id, response, ticket)

    def _collect_raft_completions(self) -> None:
        for ticket, outcome in self.raft.take_completions():
            in_flight = self._in_flight
            if in_flight is None or in_flight.ticket != ticket:
                continue  # a proposal from an earlier leadership, already answered
            if isinstance(outcome, RaftError):
                self._in_flight = None
                if in_flight.operation_id is not None:
                    self._responses.append(self._raft_error_outcome(in_flight.operation_id, outcome))
                continue
            in_flight.raft_index = outcome
        self._maybe_release()

    def _maybe_release(self) -> None:
        in_flight = self._in_flight
        if in_flight is None or in_flight.raft_index is None or self.last_applied_index < in_flight.raft_index:
            return
        self._in_flight = None
        if in_flight.operation_id is None:
            if self._barrier_term is not None and self._ready_term != self._barrier_term:
                self._ready_term = self._barrier_term
                self.controller.become_active(self._now_ms)
            return
        self._responses.append(ControllerOutcome(in_flight.operation_id, response=in_flight.response))

    def _reject_queue(self, leader_id: int | None) -> None:
        if self._in_flight is not None and self._in_flight.operation_id is not None and self._in_flight.raft_index is None:
            # Proposed as leader, leadership lost before the commit was confirmed: the outcome is unknown to us,
            # so answer NOT_CONTROLLER; the caller retries and the controller's checks make a retry harmless.
            self._responses.append(self._not_controller(self._in_flight.operation_id, leader_id))
            self._in_flight = None
        while self._queue:
            operation_id, _ = self._queue.popleft()
            self._responses.append(self._not_controller(operation_id, leader_id))

    @staticmethod
    def _not_controller(operation_id: int, leader_id: int | None) -> ControllerOutcome:
        return ControllerOutcome(
            operation_id,
            error=KafkaError(f"not the controller; leader is {leader_id}", ErrorCode.NOT_CONTROLLER),
            leader_hint=leader_id,
        )

    def _raft_error_outcome(self, operation_id: int, error: RaftError) -> ControllerOutcome:
        if isinstance(error, NotLeaderError):
            return self._not_controller(operation_id, error.leader_hint)
        return ControllerOutcome(operation_id, error=KafkaError(str(error), ErrorCode.REQUEST_TIMED_OUT))

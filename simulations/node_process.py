"""One node of the whole-cluster simulation: `NodeProcess` drives a node's sans-IO `NodeState` over the
simulated network, disk and clock exactly as net/node.py drives it over sockets, files and trio.

Theory of operation. Every input (a Raft message, a Kafka request from a client or another broker, a replica
fetch answer, a controller RPC, a timer) is an event of the loop; after each, the node steps its state and
delivers what the step returned: Raft messages, Kafka responses, controller calls (to the local controller
or as an RPC to the Raft leader), replica fetches and outbox requests to other brokers. Kafka responses leave
each connection in request order, as the listener's writer sends them: a client has one connection per node,
another broker one per lane (its replica fetcher, and each outbox API), as net/node.py keeps them. A core
that raises out of a step is a node error (the process is crashed and the error reported); a crash point
armed by the fault schedule stops the process in the middle of a step. `ServingReadCorruption` flips bytes of
reads served to a fetch, which the follower's append or the consumer's CRC check must refuse.
"""

from __future__ import annotations

import hashlib
import random
import struct
import traceback
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import cbor2

from metadata.records import encode_record
from metadata.requests import decode_request as decode_controller_request
from metadata.requests import encode_request as encode_controller_request
# KafkaApis imports its handler groups when it is first built (broker/apis.py, inside __init__, against an import
# cycle); imported with the simulator instead, their compiling is not counted in a run's wall seconds
# (simulations/run.py times a run after importing its workload).
import broker.handlers_admin  # noqa: F401
import broker.handlers_data  # noqa: F401
import broker.handlers_elastic  # noqa: F401
import broker.handlers_quotas  # noqa: F401
import broker.handlers_security  # noqa: F401
from broker.controller_calls import ControllerCalls, ControllerRpc, controller_reply, refuse_unless_leading
from broker.metadata_observer import MetadataObserver
from broker.core import ReplicaRequest
from broker.apis import Deferred, RequestFailed
from broker.node_state import NodeState, StepOutput
from broker.sasl_gate import SaslGate, needs_screening
from net.protocol.codec import ApiKey, RequestHeader, decode_request, decode_response, encode_request, encode_response
from partitions.batch import ATTRIBUTES_POSITION, HEADER_SIZE, LOG_OVERHEAD, peek_offset_and_length
from partitions.errors import ErrorCode, KafkaError
from partitions.storage import FileHandle
from simulations.disk import SimDisk, SimulatedCrash
from simulations.kafka_clients import (
    CHANNEL_KAFKA_REQUEST,
    CHANNEL_KAFKA_RESPONSE,
)
from security.session import Session, anonymous_session
from simulations.loop import US_PER_MS

if TYPE_CHECKING:
    from simulations.cluster_sim import ClusterSimulation


BROKER_BUGS = {"hw_from_leader_leo": "bug_hw_from_leader_leo", "truncate_to_own_hw": "bug_truncate_to_own_hw",
               "quiet_session_never_ages": "bug_quiet_sessions_never_age"}
# Planted bugs of a node, by name -> (whose, attribute): its controller calls' ("calls": a call in flight
# waits on the controller it asked even after this node knows another, as net/node.py once did), a broker-only
# node's metadata fetches' ("observer": a failed fetch plans no next one, so its image stalls) or the quorum
# controller's (its sessions count the time it was stalled, so a controller back from a stall fences the
# brokers whose heartbeats waited for it).
NODE_BUGS = {"wait_out_moved_controller": ("calls", "bug_wait_out_moved_controller"),
             "observer_stops_after_failure": ("observer", "bug_stops_after_failure"),
             "sessions_count_stalls": ("controller", "bug_sessions_count_stalls"),
             # the simulated listener sends each answer when it is ready, an answer owed longer (a parked
             # fetch, an acks=all produce) overtaken by a later quick one: caught by answers_in_order
             "answers_when_ready": ("process", "bug_answers_when_ready")}
STEP_INTERVAL_MS = 50  # the broker tick (the real node's is 20 ms; nothing here is due more often)
TICK_SPACING_US_MIN = 100
REPLICA_REQUEST_TIMEOUT_MS = 10_000
REPLICA_RECONNECT_BACKOFF_MS = 200
REPLICA_IDLE_BACKOFF_MS = 50
SHUTDOWN_POLL_MS = 50
CHANNEL_RAFT = b"R"
CHANNEL_CONTROLLER_REQUEST = b"C"
CHANNEL_CONTROLLER_RESPONSE = b"D"
CHANNEL_METADATA_FETCH = b"M"  # an observer (broker-only node) asks a controller for committed entries
CHANNEL_METADATA_ANSWER = b"N"
# A broker's Kafka requests to another broker, each tagged with the connection it travels on (`_LANE`): a real node
# keeps one connection per leader for its replica fetcher and one per (destination, API) for its outbox
# (net/node.py), and a broker answers each connection in request order, so the answer to a follower's fetch
# never waits behind a WriteTxnMarkers that waits for that follower's next fetch.
CHANNEL_BROKER_KAFKA_REQUEST = b"B"
_LANE = struct.Struct(">h")
REPLICA_FETCHER_LANE = -1  # the outbox's lanes are its API keys
OBSERVER_FETCH_TIMEOUT_MS = 2_000  # above the leader's hold (METADATA_FETCH_WAIT_MS_MAX) and slow links


def _describe(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)[-3:]
    where = " <- ".join(f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} {frame.name}" for frame in reversed(frames))
    return f"{type(error).__name__}: {error} at {where}"


class _NodeDied(Exception):
    """Internal: the process died (crash point or node error) in the middle of handling an event."""


class ServingReadCorruption:
    """A Storage over a SimDisk whose partition-log reads return a flipped byte now and then, but only while
    `serving` (a fetch being answered): recovery reads stay clean, so a corrupt read is never mistaken for
    a torn tail and cut away. Everything else is the disk's own behaviour."""

    def __init__(self, disk: SimDisk, rng: random.Random, probability: float) -> None:
        self.disk = disk
        self.rng = rng
        self.probability = probability
        self.serving = False
        self.corrupted_reads = 0

    def open(self, path: str, create: bool = True) -> FileHandle:
        handle = self.disk.open(path, create)
        if self.probability and path.startswith("logs/") and path.endswith(".log"):
            return _CorruptingHandle(self, handle)
        return handle

    def maybe_corrupt(self, data: bytes) -> bytes:
        # Only reads of whole batches (the bytes a fetch serves) are corrupted, not the segment's header
        # walks (12- and 61-byte reads), which the log trusts: a flipped length there fails an assertion in
        # partitions/segment.py instead of an error answer (reported as a finding).
        if not self.serving or len(data) <= HEADER_SIZE or self.rng.random() >= self.probability:
            return data
        covered = _crc_covered_ranges(data)
        if not covered:
            return data
        # The flip lands where the batch CRC-32C reaches (attributes to the end of the batch). The first 21
        # bytes (base offset, length, partition leader epoch, magic, the CRC itself) are outside it in the
        # v2 format, in Kafka too: a flipped leader epoch there passes every check (a 60 s sweep found
        # replicas that differ only in it), so it is not a fault a CRC can be asked to catch.
        start, end = self.rng.choice(covered)
        self.corrupted_reads += 1
        flipped = bytearray(data)
        flipped[self.rng.randrange(start, end)] ^= 1 << self.rng.randrange(8)
        return bytes(flipped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.disk, name)


def _crc_covered_ranges(data: bytes) -> list[tuple[int, int]]:
    """[start, end) of the CRC-covered bytes of each whole batch in `data` (reads served to a fetch start at
    a batch boundary)."""
    ranges: list[tuple[int, int]] = []
    position = 0
    while position + HEADER_SIZE <= len(data):
        _, size = peek_offset_and_length(data[position:position + LOG_OVERHEAD])
        end = position + size
        if size < HEADER_SIZE or end > len(data):
            break
        ranges.append((position + ATTRIBUTES_POSITION, end))
        position = end
    return ranges


class _CorruptingHandle:
    def __init__(self, storage: ServingReadCorruption, handle: FileHandle) -> None:
        self._storage = storage
        self._handle = handle

    def read_at(self, position: int, size: int) -> bytes:
        return self._storage.maybe_corrupt(self._handle.read_at(position, size))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


@dataclass(eq=False)
class _ReplySlot:
    """An answer a Kafka connection owes: `data` (the encoded response) is None until it is ready."""
    header: RequestHeader | None = None
    response: Any = None
    data: bytes | None = None


@dataclass(eq=False)
class _HeldMetadataFetch:
    peer_id: int
    connection: int
    request: dict
    news: tuple[int, int | None]  # NodeState.metadata_news when it was held
    timer: int | None = None


@dataclass
class _Fetcher:
    inflight: ReplicaRequest | None = None
    correlation_id: int = 0
    wake_handle: int | None = None
    timeout_handle: int | None = None


class NodeProcess:
    """One running incarnation of a node: its NodeState and the runtime around it. Dies on crash."""

    def __init__(self, sim: ClusterSimulation, node_id: int, incarnation: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.incarnation = incarnation
        self.alive = True
        self.paused = False
        self.stopping = False
        seed_bytes = hashlib.sha256(f"{sim.config.seed}/{node_id}/{incarnation}".encode()).digest()
        self.state = NodeState(
            sim.cluster, node_id, sim.storages[node_id], sim.loop.derive_rng(f"node-{node_id}-{incarnation}"),
            lambda: sim.loop.now_ms, incarnation_id=seed_bytes[:16], raft_config=sim.raft_config,
            raft_bug_switches=sim.raft_bugs,
        )
        core = self.state.broker
        assert core is not None, f"node {node_id} has no broker role"
        for name in sorted(sim.broker_bugs):
            setattr(core, BROKER_BUGS[name], True)
        self.calls = ControllerCalls(self.state, _SimControllerCallPort(self))
        self.observer = MetadataObserver(self.state, _SimMetadataFetchPort(self), OBSERVER_FETCH_TIMEOUT_MS)
        self.bug_answers_when_ready = False  # planted (NODE_BUGS)
        for name in sorted(sim.node_bugs):
            whose, attribute = NODE_BUGS[name]
            target = {"calls": self.calls, "observer": self.observer, "process": self}.get(whose,
                                                                                        self.state.controller)
            if target is not None:
                setattr(target, attribute, True)
        sim.configure_node(self.state)
        self.broker = core
        self.raft = self.state.raft  # None on a broker-only node (an observer)
        self.peers = [] if self.raft is None else [n for n in self.state.controller_ids if n != node_id]
        self._held_metadata_fetches: list[_HeldMetadataFetch] = []  # controllers: observers' fetches, in order
        self.connections: dict[int, int] = {}  # peer -> connection number (changes on every connect/reset)
        self._connection_counter = 0
        self._raft_timer: int | None = None
        self._raft_timer_us: int | None = None
        self._step_timer: int | None = None
        self._next_correlation_id = 0
        # request id -> peer, connection, the connection's owed answers and this request's place among them
        self._pending_kafka: dict[int, tuple[int, int, deque[_ReplySlot], _ReplySlot]] = {}
        # Each Kafka connection's answers in request order, as the listener's writer sends them (net/server.py):
        # an answer ready before one still owed on its connection waits behind it. (peer, lane) -> its owed slots.
        # A client has one connection (lane None); another broker one per lane (CHANNEL_BROKER_KAFKA_REQUEST).
        self._owed_replies: dict[tuple[int, int | None], deque[_ReplySlot]] = {}
        self._fetchers: dict[int, _Fetcher] = {}
        self._outbox_inflight: dict[int, tuple[Any, int]] = {}  # correlation id -> (BrokerRequest, timeout)
        self._rpc_in: dict[int, tuple[int, int, int]] = {}  # operation id -> peer, connection, rpc id
        self._seen_metadata_index = 0
        self._observed_leader_term = -1  # _observe: what this process last reported
        self._observed_replicas: dict[tuple[str, int], tuple[int, bool, int, int | None]] = {}
        self._observe_stable = getattr(sim.checkers, "observe_last_stable_offset", None)
        self._held_events: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []  # while paused, in order
        # Kafka connections as the listener keeps them (net/server.py): a security session per peer, and the
        # frames of a peer muted by a client quota's throttle, handled in order once it is over.
        self._sessions: dict[int, Session] = {}
        self._muted: dict[int, list[tuple[bytes, int | None]]] = {}  # peer -> (frame, lane), in order
        self._observe_request = getattr(sim.checkers, "observe_request", None)
        self._observe_response = getattr(sim.checkers, "observe_response", None)
        # SASL listeners (the sasl workload): the sessions its clients open, and the gate of net/dispatcher.py
        sasl_security = getattr(sim, "sasl_security", None)
        self._sasl_gate = (SaslGate(self.state.apis, sasl_security)
                           if sasl_security is not None and self.state.apis is not None else None)
        if self._sasl_gate is not None:
            sim.configure_sasl_gate(self._sasl_gate)
        self._open_session: Callable[[int], Session] = getattr(sim, "open_kafka_session", None) or (
            lambda peer_id: anonymous_session())
        self._observe_sasl = getattr(sim.checkers, "observe_sasl", None)
        self._closing: dict[int, int] = {}  # peer -> connection the gate closes: nothing more is read from it

    # --- the guard: every entry into the cores -----------------------------------------------------------

    def _guard(self, action: Callable[..., Any], *args: Any) -> Any:
        """Run `action`; a crash point or an exception out of a core ends this process (raises _NodeDied)."""
        if not self.alive:
            raise _NodeDied()
        try:
            return action(*args)
        except SimulatedCrash:
            self.sim.died_mid_step(self.node_id, self)
            raise _NodeDied() from None
        except _NodeDied:
            raise
        except Exception as error:  # any exception out of a core is a bug to report, not to hide
            self.sim.node_error(self.node_id, self, _describe(error))
            raise _NodeDied() from None

    def _event(self, action: Callable[..., Any], *args: Any) -> None:
        """A loop event on this process: dropped when it is dead, held while it is paused and run on resume
        (a stopped process's overdue timers fire when it continues: dropping them lost a controller call's
        retry, and with it an ISR expansion, for good)."""
        if not self.alive:
            return
        if self.paused:
            self._held_events.append((action, args))
            return
        try:
            action(*args)
        except _NodeDied:
            pass

    # --- endpoint ---------------------------------------------------------------------------------------

    def on_connected(self, peer_id: int) -> None:
        self._connection_counter += 1
        self.connections[peer_id] = self._connection_counter
        if peer_id in self.peers:
            self._event(self._raft_input, self.raft.connected, peer_id)
        self._event(self._sync_fetchers)

    def on_disconnected(self, peer_id: int) -> None:
        self.connections.pop(peer_id, None)
        self._sessions.pop(peer_id, None)
        self._muted.pop(peer_id, None)
        self._closing.pop(peer_id, None)
        for key in [key for key in self._owed_replies if key[0] == peer_id]:
            del self._owed_replies[key]
        self._event(self._after_disconnect, peer_id)

    def _after_disconnect(self, peer_id: int) -> None:
        if peer_id in self.peers:
            self._raft_input(self.raft.disconnected, peer_id)
        self.observer.on_connection_lost(peer_id)
        fetcher = self._fetchers.get(peer_id)
        if fetcher is not None and fetcher.inflight is not None:
            self._fail_replica_request(peer_id, fetcher)
        self._guard(self.calls.on_connection_lost, peer_id)
        self._fail_broker_requests_to(peer_id)

    def on_message(self, peer_id: int, data: bytes) -> None:
        self._event(self._dispatch, peer_id, data)

    def _dispatch(self, peer_id: int, data: bytes) -> None:
        channel, payload = data[:1], data[1:]
        if channel == CHANNEL_RAFT:
            self._raft_input(self.raft.receive, peer_id, payload)
        elif channel == CHANNEL_KAFKA_REQUEST:
            self._handle_kafka_request(peer_id, payload, None)
        elif channel == CHANNEL_BROKER_KAFKA_REQUEST:
            self._handle_kafka_request(peer_id, payload[_LANE.size:], _LANE.unpack_from(payload)[0])
        elif channel == CHANNEL_KAFKA_RESPONSE:
            self._handle_replica_response(peer_id, payload)
        elif channel == CHANNEL_CONTROLLER_REQUEST:
            self._handle_controller_rpc(peer_id, payload)
        elif channel == CHANNEL_METADATA_FETCH:
            self._serve_metadata_fetch(peer_id, cbor2.loads(payload))
        elif channel == CHANNEL_METADATA_ANSWER:
            self._guard(self.observer.on_answer, peer_id, cbor2.loads(payload))
        else:
            assert channel == CHANNEL_CONTROLLER_RESPONSE, f"channel {channel!r} from {peer_id}"
            self._handle_controller_rpc_response(payload)

    def _send(self, peer_id: int, channel: bytes, payload: bytes) -> bool:
        return self.sim.network.send(self.node_id, peer_id, channel + payload)

    # --- Raft and the node step -------------------------------------------------------------------------

    def start(self) -> None:
        self._event(self._periodic)
        if self.raft is None:
            self._event(self.observer.fetch)

    # --- controllers: observers' fetches, held by the quorum leader --------------------------------------

    def _serve_metadata_fetch(self, peer_id: int, request: dict) -> None:
        """As net/node.py: answer at once, or hold the fetch until an entry is committed, the leader changes
        (`_answer_held_metadata_fetches`, after each step) or its wait is over."""
        now_ms = self.sim.loop.now_ms
        hold_ms = self._guard(self.state.metadata_fetch_hold_ms, request, now_ms)
        if not hold_ms:
            answer = self._guard(self.state.metadata_fetch_answer, request, now_ms)
            self._send(peer_id, CHANNEL_METADATA_ANSWER, cbor2.dumps(answer))
            return
        held = _HeldMetadataFetch(peer_id, self.connections.get(peer_id, -1), request, self.state.metadata_news())
        held.timer = self.sim.loop.call_later(hold_ms * US_PER_MS, self._event, self._answer_held_metadata_fetch, held)
        self._held_metadata_fetches.append(held)

    def _answer_held_metadata_fetch(self, held: _HeldMetadataFetch) -> None:
        if held not in self._held_metadata_fetches:
            return  # answered on news while its timer's event waited out a pause
        self._held_metadata_fetches.remove(held)
        self.sim.loop.cancel(held.timer)
        if self.connections.get(held.peer_id) != held.connection:
            return  # the observer's connection is gone, and the fetch with it
        answer = self._guard(self.state.metadata_fetch_answer, held.request, self.sim.loop.now_ms, True)
        self._send(held.peer_id, CHANNEL_METADATA_ANSWER, cbor2.dumps(answer))

    def _answer_held_metadata_fetches(self) -> None:
        news = self.state.metadata_news()
        for held in [held for held in self._held_metadata_fetches if held.news != news]:
            self._answer_held_metadata_fetch(held)

    def _raft_input(self, action: Callable[..., Any], *args: Any) -> None:
        self._guard(action, *args)
        self._ship_raft()
        self._process()

    def _ship_raft(self) -> None:
        for peer_id, payload in self._guard(self.raft.take_outbox):
            self._send(peer_id, CHANNEL_RAFT, payload)

    def _process(self) -> None:
        """NodeState.step and deliver its output; the raft timer follows the driver's next deadline."""
        output = self._guard(self.state.step, self.sim.loop.now_ms)
        self._deliver(output)
        self._guard(self.calls.abandon_moved)
        if self._held_metadata_fetches:
            self._answer_held_metadata_fetches()
        if output.proposed:
            self._ship_raft()
        self._observe()
        if self.raft is not None:
            self._schedule_raft_timer(soon=output.proposed)

    def _periodic(self) -> None:
        self._step_timer = None
        self._process()
        # The next step: the broker tick's pace, or sooner when a delayed fetch expires before it.
        loop = self.sim.loop
        next_us = loop.now_us + STEP_INTERVAL_MS * US_PER_MS
        fetch_deadline_ms = self.state.apis.next_deadline_ms()
        if fetch_deadline_ms is not None:
            next_us = max(min(next_us, fetch_deadline_ms * US_PER_MS), loop.now_us + TICK_SPACING_US_MIN)
        self._step_timer = loop.call_at(next_us, self._event, self._periodic)

    def _raft_tick(self) -> None:
        self._raft_timer = None
        self._raft_timer_us = None
        self._raft_input(self.raft.tick, self.sim.loop.now_ms)

    def _schedule_raft_timer(self, soon: bool = False) -> None:
        if not self.alive or self.paused:
            return
        loop = self.sim.loop
        deadline_us = loop.now_us + TICK_SPACING_US_MIN if soon else max(
            self._guard(self.raft.next_deadline_ms) * US_PER_MS, loop.now_us + TICK_SPACING_US_MIN)
        if self._raft_timer is not None and self._raft_timer_us is not None and self._raft_timer_us <= deadline_us:
            return
        loop.cancel(self._raft_timer)
        self._raft_timer_us = deadline_us
        self._raft_timer = loop.call_at(deadline_us, self._event, self._raft_tick)

    def _deliver(self, output: StepOutput) -> None:
        self._end_on_failure(output.failures)
        for outcome in output.controller_outcomes:
            if not self._guard(self.calls.on_local_outcome, outcome):
                self._answer_controller_rpc(outcome)
        self._send_kafka_completions(output.kafka_completions)
        for call in output.controller_calls:
            self._guard(self.calls.start, call)
        for request in output.broker_requests:
            self._send_broker_request(request)
        self._sync_fetchers()

    def _after_kafka_event(self) -> None:
        self._deliver(self._guard(self.state.after_kafka_event, self.sim.loop.now_ms))

    def _observe(self) -> None:
        """Tell the checkers what changed since this process last told them. An observation repeated with the
        same values changes nothing in a checker (each keeps, per process incarnation, the last value and the
        first violation), so only changes are reported; this runs after every event."""
        checkers = self.sim.checkers
        if self.raft is not None:
            is_leader, term, _ = self._guard(self.raft.leadership)
            if is_leader and term != self._observed_leader_term:
                self._observed_leader_term = term
                checkers.observe_raft_leader(self.node_id, term)
        observe_stable = self._observe_stable
        observed = self._observed_replicas
        partitions = self.broker.partitions
        for key in sorted(partitions):
            hosted = partitions[key]
            replica = hosted.replica
            is_leader = replica.is_leader
            seen = (replica.high_watermark, is_leader, replica.leader_epoch,
                    replica.last_stable_offset if is_leader and observe_stable is not None else None)
            if observed.get(key) == seen:
                continue
            observed[key] = seen
            high_watermark, _, leader_epoch, last_stable_offset = seen
            checkers.observe_replica(self.node_id, self.incarnation, key, high_watermark, is_leader, leader_epoch,
                                     hosted.topic_id)
            if last_stable_offset is not None:
                observe_stable(self.node_id, self.incarnation, key, leader_epoch, last_stable_offset)
        metadata_log = self.state.metadata_log
        if metadata_log and metadata_log[-1][0] > self._seen_metadata_index:  # entries come in Raft index order
            for raft_index, _, records in metadata_log[-64:]:
                if raft_index > self._seen_metadata_index:
                    self._seen_metadata_index = raft_index
                    checkers.observe_metadata(self.node_id, raft_index, [encode_record(r) for r in records])

    # --- Kafka requests (clients and other brokers' fetchers) -------------------------------------------

    def _handle_kafka_request(self, peer_id: int, frame: bytes, lane: int | None) -> None:
        muted = self._muted.get(peer_id)
        if muted is not None:
            muted.append((frame, lane))  # behind the frames a throttle holds, in order
            return
        session = self._sessions.get(peer_id)
        if session is None:
            session = self._sessions[peer_id] = self._open_session(peer_id)
        if session.throttled_until_ms > self.sim.loop.now_ms:
            self._mute(peer_id, [(frame, lane)], session)
            return
        self._serve_kafka_request(peer_id, frame, lane, session)

    def _screen_sasl(self, peer_id: int, frame: bytes, lane: int | None, session: Session) -> bool:
        """The SASL gate of net/dispatcher.py: True when it kept the frame (answered it, closed the
        connection, or both), False for a frame to serve as an ordinary request."""
        connection = self.connections.get(peer_id, -1)
        body = memoryview(frame)[4:]
        outcome = self._guard(self._sasl_gate.screen, session, body, self.sim.loop.now_ms)
        if self._observe_sasl is not None:
            self._observe_sasl(self, connection, body, outcome, session)
        if outcome is None:
            return False
        if outcome.reply:
            self._reply(peer_id, lane, None, None, outcome.reply)
        if outcome.close_delay_ms is not None:
            self._closing[peer_id] = connection
            self.sim.loop.call_later(outcome.close_delay_ms * US_PER_MS, self._event, self._close_kafka_connection,
                                     peer_id, connection)
        return True

    def _close_kafka_connection(self, peer_id: int, connection: int) -> None:
        if self.connections.get(peer_id) == connection:
            self.sim.network.close(self.node_id, peer_id)

    def _mute(self, peer_id: int, frames: list[tuple[bytes, int | None]], session: Session) -> None:
        """Hold `frames` until the session's throttle is over (the listener reads nothing from a muted
        connection); a reset of the connection drops them, as it would the socket's buffer."""
        self._muted[peer_id] = frames
        delay_us = (session.throttled_until_ms - self.sim.loop.now_ms) * US_PER_MS
        self.sim.loop.call_later(delay_us, self._event, self._unmute, peer_id, self.connections.get(peer_id, -1))

    def _unmute(self, peer_id: int, connection: int) -> None:
        if self.connections.get(peer_id) != connection:
            return
        frames = self._muted.pop(peer_id, [])
        session = self._sessions[peer_id]
        for index, (frame, lane) in enumerate(frames):
            if session.throttled_until_ms > self.sim.loop.now_ms:
                self._mute(peer_id, frames[index:], session)
                return
            self._serve_kafka_request(peer_id, frame, lane, session)

    def _serve_kafka_request(self, peer_id: int, frame: bytes, lane: int | None, session: Session) -> None:
        if self._closing and self._closing.get(peer_id) == self.connections.get(peer_id):
            return  # the listener reads nothing more from a connection it is closing
        if (self._sasl_gate is not None and needs_screening(session)
                and self._screen_sasl(peer_id, frame, lane, session)):
            return
        header, request = decode_request(memoryview(frame)[4:])
        if not self.state.apis.is_supported(header.api_key, header.api_version):
            self.sim.network.close(self.node_id, peer_id)  # as the listener's dispatcher does
            return
        if self._observe_request is not None:
            self._observe_request(self, self.connections.get(peer_id, -1), header, request)
        self.state.apis.session = session
        storage = self.sim.storages[self.node_id]
        is_fetch = header.api_key == ApiKey.FETCH
        storage.serving = is_fetch
        try:
            result = self._guard(self.state.apis.handle, header, request, self.sim.loop.now_ms)
            if isinstance(result, Deferred):
                owed, slot = self._owed_replies.setdefault((peer_id, lane), deque()), _ReplySlot()
                owed.append(slot)
                self._pending_kafka[result.request_id] = (peer_id, self.connections.get(peer_id, -1), owed, slot)
            elif result is not None:
                self._reply(peer_id, lane, header, result, self._guard(encode_response, header, result))
        finally:
            storage.serving = False
        self._after_kafka_event()

    def _send_kafka_completions(self, completions: list[tuple[int, Any, Any]]) -> None:
        storage = self.sim.storages[self.node_id]
        for request_id, header, response in completions:
            if isinstance(response, RequestFailed):  # a deferred answer's build raised: a bug to report
                self.sim.node_error(self.node_id, self, _describe(response.error))
                raise _NodeDied()
            peer_id, connection, owed, slot = self._pending_kafka.pop(request_id, (None, None, None, None))
            if peer_id is None or self.connections.get(peer_id) != connection:
                continue  # the requester's connection is gone: so is the answer
            storage.serving = header.api_key == ApiKey.FETCH
            try:
                data = self._guard(encode_response, header, response)
            finally:
                storage.serving = False
            slot.header, slot.response, slot.data = header, response, data
            if self.bug_answers_when_ready:
                owed.remove(slot)
                self._send_reply(peer_id, header, response, data)
            while owed and owed[0].data is not None:
                slot = owed.popleft()
                self._send_reply(peer_id, slot.header, slot.response, slot.data)

    def _reply(self, peer_id: int, lane: int | None, header: RequestHeader | None, response: Any, data: bytes) -> None:
        """Send an answer now, or queue it behind the answers its connection still owes."""
        owed = self._owed_replies.get((peer_id, lane))
        if owed and not self.bug_answers_when_ready:
            owed.append(_ReplySlot(header, response, data))
        else:
            self._send_reply(peer_id, header, response, data)

    def _send_reply(self, peer_id: int, header: RequestHeader | None, response: Any, data: bytes) -> None:
        if header is not None and self._observe_response is not None:
            self._observe_response(self, self.connections.get(peer_id, -1), header, response)
        self._send(peer_id, CHANNEL_KAFKA_RESPONSE, data)

    # --- replica fetchers -------------------------------------------------------------------------------

    def _sync_fetchers(self) -> None:
        for leader_id in sorted(self.broker.replica_leaders()):
            fetcher = self._fetcher(leader_id)
            if fetcher.inflight is None and fetcher.wake_handle is None:
                fetcher.wake_handle = self.sim.loop.call_later(0, self._event, self._fetch_next, leader_id)

    def _fetcher(self, leader_id: int) -> _Fetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = _Fetcher()
        return fetcher

    def _wake_fetcher_later(self, leader_id: int, delay_ms: int) -> None:
        fetcher = self._fetcher(leader_id)
        if fetcher.wake_handle is None:
            fetcher.wake_handle = self.sim.loop.call_later(delay_ms * US_PER_MS, self._event, self._fetch_next, leader_id)

    def _fetch_next(self, leader_id: int) -> None:
        fetcher = self._fetchers[leader_id]
        fetcher.wake_handle = None
        if fetcher.inflight is not None or leader_id not in self.broker.replica_leaders():
            return
        if leader_id not in self.connections:
            self._wake_fetcher_later(leader_id, REPLICA_RECONNECT_BACKOFF_MS)
            return
        sent = self._guard(self.broker.next_replica_request, leader_id, self.sim.loop.now_ms)
        if sent is None:
            self._wake_fetcher_later(leader_id, REPLICA_IDLE_BACKOFF_MS)
            return
        self._next_correlation_id += 1
        header = RequestHeader(sent.api_key, sent.api_version, self._next_correlation_id, f"replica-{self.node_id}")
        if not self._send(leader_id, CHANNEL_BROKER_KAFKA_REQUEST,
                          _LANE.pack(REPLICA_FETCHER_LANE) + encode_request(header, sent.request)):
            self._guard(self.broker.on_replica_response, sent, None, self.sim.loop.now_ms)
            self._wake_fetcher_later(leader_id, REPLICA_RECONNECT_BACKOFF_MS)
            return
        fetcher.inflight = sent
        fetcher.correlation_id = self._next_correlation_id
        fetcher.timeout_handle = self.sim.loop.call_later(
            REPLICA_REQUEST_TIMEOUT_MS * US_PER_MS, self._event, self._replica_timeout, leader_id, fetcher.correlation_id)

    def _replica_timeout(self, leader_id: int, correlation_id: int) -> None:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None and fetcher.inflight is not None and fetcher.correlation_id == correlation_id:
            self._fail_replica_request(leader_id, fetcher)

    def _fail_replica_request(self, leader_id: int, fetcher: _Fetcher) -> None:
        sent, fetcher.inflight = fetcher.inflight, None
        self.sim.loop.cancel(fetcher.timeout_handle)
        fetcher.timeout_handle = None
        self._guard(self.broker.on_replica_response, sent, None, self.sim.loop.now_ms)
        self._wake_fetcher_later(leader_id, REPLICA_RECONNECT_BACKOFF_MS)

    def _handle_replica_response(self, peer_id: int, frame: bytes) -> None:
        fetcher = self._fetchers.get(peer_id)
        view = memoryview(frame)[4:]
        correlation_id = int.from_bytes(view[:4], "big", signed=True)
        if correlation_id in self._outbox_inflight:
            self._answer_broker_request(correlation_id, view)
            return
        if fetcher is None or fetcher.inflight is None or fetcher.correlation_id != correlation_id:
            return  # an answer to a request that timed out
        sent, fetcher.inflight = fetcher.inflight, None
        self.sim.loop.cancel(fetcher.timeout_handle)
        fetcher.timeout_handle = None
        _, response = decode_response(sent.api_key, sent.api_version, view)
        self._guard(self.broker.on_replica_response, sent, response, self.sim.loop.now_ms)
        self._after_kafka_event()  # re-arms this fetcher through _sync_fetchers
        self._observe()

    # --- the outbox: requests to other brokers --------------------------------------------------------------

    def _send_broker_request(self, sent: Any) -> None:
        now_ms = self.sim.loop.now_ms
        if sent.destination not in self.connections:
            self._finish_broker_request(sent, KafkaError(f"no connection to broker {sent.destination}",
                                                         ErrorCode.NETWORK_EXCEPTION))
            return
        self._next_correlation_id += 1
        correlation_id = self._next_correlation_id
        header = RequestHeader(sent.api_key, sent.api_version, correlation_id, f"broker-{self.node_id}")
        if not self._send(sent.destination, CHANNEL_BROKER_KAFKA_REQUEST,
                          _LANE.pack(sent.api_key) + encode_request(header, sent.request)):
            self._finish_broker_request(sent, KafkaError("send failed", ErrorCode.NETWORK_EXCEPTION))
            return
        timeout = self.sim.loop.call_later(max(sent.deadline_ms - now_ms, 1) * US_PER_MS, self._event,
                                           self._broker_request_timeout, correlation_id)
        self._outbox_inflight[correlation_id] = (sent, timeout)

    def _answer_broker_request(self, correlation_id: int, view: memoryview) -> None:
        sent, timeout = self._outbox_inflight.pop(correlation_id)
        self.sim.loop.cancel(timeout)
        _, response = decode_response(sent.api_key, sent.api_version, view)
        self._finish_broker_request(sent, response)

    def _broker_request_timeout(self, correlation_id: int) -> None:
        entry = self._outbox_inflight.pop(correlation_id, None)
        if entry is not None:
            self._finish_broker_request(entry[0], KafkaError("no answer in time", ErrorCode.REQUEST_TIMED_OUT))

    def _fail_broker_requests_to(self, peer_id: int) -> None:
        for correlation_id, (sent, timeout) in sorted(self._outbox_inflight.items()):
            if sent.destination == peer_id:
                del self._outbox_inflight[correlation_id]
                self.sim.loop.cancel(timeout)
                self._finish_broker_request(sent, KafkaError("connection lost", ErrorCode.NETWORK_EXCEPTION))

    def _finish_broker_request(self, sent: Any, answer: Any) -> None:
        self._guard(self.broker.on_broker_response, sent, answer, self.sim.loop.now_ms)
        self._end_on_failure(self.broker.failures)
        self._schedule_process_soon()

    def _end_on_failure(self, failures: list) -> None:
        """An exception the real node survives (BrokerCore.failures, taken into a step's output or still held)
        is a bug all the same: the process ends now, as when it raised out of the core."""
        if failures:
            self.sim.node_error(self.node_id, self, _describe(failures[0].error))
            raise _NodeDied()

    # --- controller calls -------------------------------------------------------------------------------

    def _schedule_process_soon(self) -> None:
        self.sim.loop.call_later(TICK_SPACING_US_MIN, self._event, self._process)

    def _answer_controller_rpc(self, outcome: Any) -> None:
        """The local controller's outcome of another node's request: the answer goes back on its connection."""
        remote = self._rpc_in.pop(outcome.operation_id, None)
        if remote is None:
            return
        peer_id, connection, rpc_id = remote
        if self.connections.get(peer_id) == connection:
            self._send_controller_rpc_answer(peer_id, rpc_id, outcome)

    def _send_controller_rpc_answer(self, peer_id: int, rpc_id: int, outcome: Any) -> None:
        self._send(peer_id, CHANNEL_CONTROLLER_RESPONSE, cbor2.dumps([rpc_id, controller_reply(outcome)]))

    def _handle_controller_rpc(self, peer_id: int, payload: bytes) -> None:
        rpc_id, encoded = cbor2.loads(payload)
        request = decode_controller_request(encoded)
        refusal = self._guard(refuse_unless_leading, self.state)
        if refusal is not None:
            self._send_controller_rpc_answer(peer_id, rpc_id, refusal)
            return
        operation_id = self._guard(self.state.submit_controller_request, request, self.sim.loop.now_ms)
        self._rpc_in[operation_id] = (peer_id, self.connections.get(peer_id, -1), rpc_id)
        self._process()

    def _handle_controller_rpc_response(self, payload: bytes) -> None:
        rpc_id, reply = cbor2.loads(payload)
        self._guard(self.calls.on_rpc_reply, rpc_id, reply)

    def _controller_call_answered(self, fetch_metadata_now: bool) -> None:
        if fetch_metadata_now:
            self.observer.fetch_now()
        self._end_on_failure(self.broker.failures)
        self._schedule_process_soon()

    # --- lifecycle --------------------------------------------------------------------------------------

    def stop(self) -> None:
        self.alive = False
        loop = self.sim.loop
        loop.cancel(self._raft_timer)
        loop.cancel(self._step_timer)
        self.observer.close()
        for held in self._held_metadata_fetches:
            loop.cancel(held.timer)
        for fetcher in self._fetchers.values():
            loop.cancel(fetcher.wake_handle)
            loop.cancel(fetcher.timeout_handle)

    def pause(self) -> None:
        self.paused = True
        self.sim.loop.cancel(self._raft_timer)
        self._raft_timer = None
        self.sim.loop.cancel(self._step_timer)
        self._step_timer = None

    def resume(self) -> None:
        self.paused = False
        held, self._held_events = self._held_events, []
        for action, args in held:
            self._event(action, *args)
        self._event(self._periodic)
        for leader_id in sorted(self._fetchers):
            fetcher = self._fetchers[leader_id]
            if fetcher.inflight is None:
                self.sim.loop.cancel(fetcher.wake_handle)
                fetcher.wake_handle = None
                self._wake_fetcher_later(leader_id, 0)

    def begin_controlled_shutdown(self) -> None:
        self.stopping = True
        self._event(self._guard, self.broker.request_controlled_shutdown, self.sim.loop.now_ms)
        self._event(self._poll_controlled_shutdown)

    def _poll_controlled_shutdown(self) -> None:
        if self._guard(self.broker.controlled_shutdown_done, self.sim.loop.now_ms):
            self.sim.trace("node.controlled_shutdown_done", self.node_id, int(self.broker.shutdown_granted))
            self.sim.stop_cleanly(self.node_id, self)
            return
        self.sim.loop.call_later(SHUTDOWN_POLL_MS * US_PER_MS, self._event, self._poll_controlled_shutdown)

    def close(self) -> None:
        """A clean stop: high watermarks checkpointed, logs flushed, journal closed."""
        self._guard(self.state.close)


class _SimControllerCallPort:
    """ControllerCalls' port on the simulated network: one connection per peer, RPCs framed on the controller
    channels, timers on the loop (each an event of the process)."""

    def __init__(self, process: NodeProcess) -> None:
        self._process = process

    def reachable(self, node_id: int) -> bool:
        return node_id in self._process.connections

    def send_rpc(self, rpc: ControllerRpc) -> bool:
        payload = cbor2.dumps([rpc.rpc_id, encode_controller_request(rpc.request)])
        return self._process._send(rpc.target, CHANNEL_CONTROLLER_REQUEST, payload)

    def abandon_rpc(self, rpc_id: int) -> None:
        pass  # nothing to stop: the answer, if one comes, finds no attempt and is dropped

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> None:
        process = self._process
        process.sim.loop.call_later(delay_ms * US_PER_MS, process._event, process._guard, action)

    def step_soon(self) -> None:
        self._process._schedule_process_soon()

    def answered(self, fetch_metadata_now: bool) -> None:
        self._process._controller_call_answered(fetch_metadata_now)


class _SimMetadataFetchPort:
    """MetadataObserver's port on the simulated network: fetches and answers framed on the metadata channels
    (an answer is matched by the controller asked), timers on the loop (each an event of the process)."""

    def __init__(self, process: NodeProcess) -> None:
        self._process = process

    def reachable(self, node_id: int) -> bool:
        return node_id in self._process.connections

    def send_fetch(self, target: int, request: dict) -> bool:
        return self._process._send(target, CHANNEL_METADATA_FETCH, cbor2.dumps(request))

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> int:
        process = self._process
        return process.sim.loop.call_later(delay_ms * US_PER_MS if delay_ms else TICK_SPACING_US_MIN, process._event,
                                           action)

    def cancel(self, handle: int) -> None:
        self._process.sim.loop.cancel(handle)

    def applied(self) -> None:
        self._process._process()

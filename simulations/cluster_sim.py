"""The whole-cluster simulation: N broker+controller nodes built from the real cores, Kafka clients, faults,
and safety and liveness checkers.

Theory of operation. Each node process is a `broker.node_state.NodeState` (Raft driver over pysyncobj,
controller, metadata publishing, BrokerCore, KafkaApis) over the node's `SimDisk`, driven exactly as the trio
runtime (net/node.py + raftlog/shell.py) drives it, with virtual time:
- after every Raft input (tick, message, connect, disconnect) the outbox ships, then `step(now)` runs and its
  output is delivered (controller outcomes, deferred Kafka responses, controller calls); `step` also runs
  every `STEP_INTERVAL_MS`;
- Kafka requests (client ones and replica fetches) travel as real codec frames and are answered by
  `KafkaApis.handle` at once, not at all (acks=0) or later (`Deferred`, delivered from `kafka_completions`);
- a replica fetcher per leader sends what `BrokerCore.next_replica_request` builds, one request at a time;
- controller calls go to the node this node believes leads the quorum: locally through
  `submit_controller_request`, remotely as a CBOR RPC that the leader submits locally; NOT_CONTROLLER and
  lost connections retry after `CONTROLLER_RETRY_BACKOFF_MS` until `CONTROLLER_CALL_TIMEOUT_MS`.
One stream between two nodes carries all of that, each message tagged with a channel byte; a reset fails
everything outstanding on it, as a broken TCP connection would.

Faults: the shared `FaultSchedule` (crash, power loss, pause, crash points inside a step, partitions,
one-way partitions, isolating the quorum leader, delay, drop, reset), plus this workload's own:
isolating a partition leader, a controlled shutdown followed by a restart, and a flipped byte on reads of
partition logs while they are served to a fetch (a CRC must catch it: the follower's append or the consumer
refuses the batch). A crash drops the NodeState and keeps the disk's page cache; a power loss keeps what was
fsynced; a restart builds a new NodeState over the same disk.

A run: create the topic, produce and consume for `duration_s` simulated seconds under faults (the safety
phase), then heal everything, stop generating records and require, within `LIVENESS_MS_MAX`, that every
producer settles, every replica of every partition converges (same log end offset, high watermark at it) and
the consumer has read up to it (the liveness phase). Then the converged logs are compared with what was
acknowledged and read (see simulations/cluster_checkers.py).

Bug switches (never a node's config): pysyncobj fixes "A", "B", "D", "E" off (RaftDriver bug_switches) and
the planted broker bugs "hw_from_leader_leo" and "truncate_to_own_hw".
"""

from __future__ import annotations

import hashlib
import logging
import random
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import cbor2

from metadata.records import encode_record
from metadata.requests import (
    decode_request as decode_controller_request,
    decode_response as decode_controller_response,
    encode_request as encode_controller_request,
    encode_response as encode_controller_response,
)
from broker.core import ControllerCall, ReplicaRequest
from broker.config import ClusterConfig, parse_config
from broker.apis import Deferred
from broker.node_state import NodeState, StepOutput
from net.protocol.codec import ApiKey, RequestHeader, decode_request, decode_response, encode_request, encode_response
from partitions.batch import ATTRIBUTES_POSITION, HEADER_SIZE, LOG_OVERHEAD, iter_batches, peek_offset_and_length
from partitions.errors import ErrorCode, KafkaError
from partitions.records import decode_batch
from partitions.storage import FileHandle
from raftlog.port import RaftConfig, RaftError
from simulations.cluster_checkers import BatchSummary, ClusterCheckers, ReplicaLog
from simulations.disk import SimDisk, SimulatedCrash
from simulations.faults import FaultSchedule, NodeFaultsMixin
from simulations.kafka_clients import (
    CHANNEL_KAFKA_REQUEST,
    CHANNEL_KAFKA_RESPONSE,
    CLIENT_ID_BASE,
    SimConsumer,
    SimProducer,
    TopicCreator,
)
from simulations.loop import US_PER_MS, US_PER_S, EventLoop, Trace
from simulations.network import Network, NetworkConfig
from simulations.run import CheckerVerdict, RunConfig, RunResult

DESCRIPTION = "the whole cluster (NodeState cores) with Kafka producers (acks=all, acks=1) and a consumer"
TOPIC = "sim"
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
BROKER_BUGS = {"hw_from_leader_leo": "bug_hw_from_leader_leo", "truncate_to_own_hw": "bug_truncate_to_own_hw"}
STEP_INTERVAL_MS = 50  # the broker tick (the real node's is 20 ms; nothing here is due more often)
TICK_SPACING_US_MIN = 100
CONTROLLER_CALL_TIMEOUT_MS = 10_000
CONTROLLER_RETRY_BACKOFF_MS = 100
REPLICA_REQUEST_TIMEOUT_MS = 10_000
REPLICA_RECONNECT_BACKOFF_MS = 200
REPLICA_IDLE_BACKOFF_MS = 50
LIVENESS_MS_MAX = 60_000
LIVENESS_CHECK_INTERVAL_MS = 100
SHUTDOWN_POLL_MS = 50
FINAL_READ_BYTES_MAX = 64 * 1024 * 1024
# This workload's own faults (probability per FAULT_STEP of 100 ms), on whenever the run has any faults.
EXTRA_FAULT_STEP_MS = 100
ISOLATE_PARTITION_LEADER_RATE = 0.01
CONTROLLED_SHUTDOWN_RATE = 0.004
EXTRA_EPISODE_MS_MIN = 200
EXTRA_EPISODE_MS_MAX = 5_000
# Swarm testing: each seed draws its shape from these.
RECORDS_PER_S_CHOICES = (50, 200, 500)
READ_CORRUPTION_CHOICES = (0.0, 0.0, 0.002, 0.02)  # per read while serving a fetch

CHANNEL_RAFT = b"R"
CHANNEL_CONTROLLER_REQUEST = b"C"
CHANNEL_CONTROLLER_RESPONSE = b"D"
RETRIABLE_CONTROLLER_ERRORS = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})


def simulation_raft_config() -> RaftConfig:
    return RaftConfig(election_timeout_min_ms=300, election_timeout_max_ms=600, heartbeat_interval_ms=50,
                      leader_fallback_timeout_ms=1_000, log_compaction_interval_ms=10_000,
                      log_compaction_entries_min=500)


def cluster_config(node_ids: list[int], broker_extra: dict | None = None) -> ClusterConfig:
    """The cluster every node runs: all nodes broker+controller; hosts and ports are labels only.
    `broker_extra` adds [broker] settings (a workload's coordinator settings)."""
    document = {
        "cluster_id": "sim-cluster",
        "nodes": [{"id": n, "host": f"node-{n}", "kafka_port": 9000 + n, "controller_port": 9100 + n,
                   "roles": ["broker", "controller"], "data_dir": f"node-{n}"} for n in node_ids],
        "topic_defaults": {"partitions": PARTITIONS, "replication_factor": min(REPLICATION_FACTOR, len(node_ids)),
                           "min_insync_replicas": min(MIN_INSYNC_REPLICAS, len(node_ids))},
        "broker": {"broker_session_timeout_ms": 3_000, "broker_heartbeat_interval_ms": 500,
                   "replica_lag_time_max_ms": 3_000, "log_flush_messages": 1, **(broker_extra or {})},
    }
    return parse_config(document, "<simulation>", "/")


@dataclass(frozen=True)
class ClusterShape:
    """The per-seed shape of the workload."""

    records_per_s: int
    keyed: bool
    read_corruption_probability: float
    producers: int = 2  # the first produces with acks=all, the second with acks=1


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


@dataclass
class _ControllerCallState:
    call: ControllerCall
    deadline_ms: int
    last_error: KafkaError


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
        broker = self.state.broker
        assert broker is not None, f"node {node_id} has no broker role"
        for name in sorted(sim.broker_bugs):
            setattr(broker, BROKER_BUGS[name], True)
        sim.configure_node(self.state)
        self.broker = broker
        self.raft = self.state.raft
        self.peers = [n for n in self.state.controller_ids if n != node_id]
        self.connections: dict[int, int] = {}  # peer -> connection number (changes on every connect/reset)
        self._connection_counter = 0
        self._raft_timer: int | None = None
        self._raft_timer_us: int | None = None
        self._step_timer: int | None = None
        self._next_correlation_id = 0
        self._pending_kafka: dict[int, tuple[int, int, RequestHeader]] = {}  # request id -> peer, connection, header
        self._fetchers: dict[int, _Fetcher] = {}
        self._outbox_inflight: dict[int, tuple[Any, int]] = {}  # correlation id -> (BrokerRequest, timeout)
        self._next_rpc_id = 0
        self._rpc_out: dict[int, tuple[_ControllerCallState, int]] = {}  # rpc id -> call, peer
        self._rpc_in: dict[int, tuple[int, int, int]] = {}  # operation id -> peer, connection, rpc id
        self._local_calls: dict[int, _ControllerCallState] = {}  # operation id -> call
        self._seen_metadata_index = 0
        self._held_events: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []  # while paused, in order

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
        self._event(self._after_disconnect, peer_id)

    def _after_disconnect(self, peer_id: int) -> None:
        if peer_id in self.peers:
            self._raft_input(self.raft.disconnected, peer_id)
        fetcher = self._fetchers.get(peer_id)
        if fetcher is not None and fetcher.inflight is not None:
            self._fail_replica_request(peer_id, fetcher)
        for rpc_id in sorted(self._rpc_out):
            call_state, target = self._rpc_out[rpc_id]
            if target == peer_id:
                del self._rpc_out[rpc_id]
                self._retry_controller_call(call_state, KafkaError("controller connection lost",
                                                                   ErrorCode.REQUEST_TIMED_OUT))
        self._fail_broker_requests_to(peer_id)

    def on_message(self, peer_id: int, data: bytes) -> None:
        self._event(self._dispatch, peer_id, data)

    def _dispatch(self, peer_id: int, data: bytes) -> None:
        channel, payload = data[:1], data[1:]
        if channel == CHANNEL_RAFT:
            self._raft_input(self.raft.receive, peer_id, payload)
        elif channel == CHANNEL_KAFKA_REQUEST:
            self._handle_kafka_request(peer_id, payload)
        elif channel == CHANNEL_KAFKA_RESPONSE:
            self._handle_replica_response(peer_id, payload)
        elif channel == CHANNEL_CONTROLLER_REQUEST:
            self._handle_controller_rpc(peer_id, payload)
        else:
            assert channel == CHANNEL_CONTROLLER_RESPONSE, f"channel {channel!r} from {peer_id}"
            self._handle_controller_rpc_response(payload)

    def _send(self, peer_id: int, channel: bytes, payload: bytes) -> bool:
        return self.sim.network.send(self.node_id, peer_id, channel + payload)

    # --- Raft and the node step -------------------------------------------------------------------------

    def start(self) -> None:
        self._event(self._periodic)

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
        if output.proposed:
            self._ship_raft()
        self._observe()
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
        now_ms = self.sim.loop.now_ms
        for outcome in output.controller_outcomes:
            self._on_controller_outcome(outcome)
        self._send_kafka_completions(output.kafka_completions)
        for call in output.controller_calls:
            self._start_controller_call(call, now_ms)
        for request in output.broker_requests:
            self._send_broker_request(request)
        self._sync_fetchers()

    def _after_kafka_event(self) -> None:
        self._deliver(self._guard(self.state.after_kafka_event, self.sim.loop.now_ms))

    def _observe(self) -> None:
        checkers = self.sim.checkers
        status = self._guard(self.raft.status)
        if status.is_leader:
            checkers.observe_raft_leader(self.node_id, status.term)
        for key in sorted(self.broker.partitions):
            replica = self.broker.partitions[key].replica
            checkers.observe_replica(self.node_id, self.incarnation, key, replica.high_watermark,
                                     replica.is_leader, replica.leader_epoch)
        for raft_index, records in self.state.metadata_log[-64:]:
            if raft_index > self._seen_metadata_index:
                self._seen_metadata_index = raft_index
                checkers.observe_metadata(self.node_id, raft_index, [encode_record(r) for r in records])

    # --- Kafka requests (clients and other brokers' fetchers) -------------------------------------------

    def _handle_kafka_request(self, peer_id: int, frame: bytes) -> None:
        header, request = decode_request(memoryview(frame)[4:])
        storage = self.sim.storages[self.node_id]
        is_fetch = header.api_key == ApiKey.FETCH
        storage.serving = is_fetch
        try:
            result = self._guard(self.state.apis.handle, header, request, self.sim.loop.now_ms)
            if isinstance(result, Deferred):
                self._pending_kafka[result.request_id] = (peer_id, self.connections.get(peer_id, -1), header)
            elif result is not None:
                self._send(peer_id, CHANNEL_KAFKA_RESPONSE, self._guard(encode_response, header, result))
        finally:
            storage.serving = False
        self._after_kafka_event()

    def _send_kafka_completions(self, completions: list[tuple[int, Any, Any]]) -> None:
        storage = self.sim.storages[self.node_id]
        for request_id, header, response in completions:
            peer_id, connection, _ = self._pending_kafka.pop(request_id, (None, None, None))
            if peer_id is None or self.connections.get(peer_id) != connection:
                continue  # the requester's connection is gone: so is the answer
            storage.serving = header.api_key == ApiKey.FETCH
            try:
                self._send(peer_id, CHANNEL_KAFKA_RESPONSE, self._guard(encode_response, header, response))
            finally:
                storage.serving = False

    # --- replica fetchers -------------------------------------------------------------------------------

    def _sync_fetchers(self) -> None:
        wanted = self.broker.replica_leaders()
        for leader_id in sorted(wanted):
            fetcher = self._fetchers.setdefault(leader_id, _Fetcher())
            if fetcher.inflight is None and fetcher.wake_handle is None:
                fetcher.wake_handle = self.sim.loop.call_later(0, self._event, self._fetch_next, leader_id)

    def _wake_fetcher_later(self, leader_id: int, delay_ms: int) -> None:
        fetcher = self._fetchers.setdefault(leader_id, _Fetcher())
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
        if not self._send(leader_id, CHANNEL_KAFKA_REQUEST, encode_request(header, sent.request)):
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
        if not self._send(sent.destination, CHANNEL_KAFKA_REQUEST, encode_request(header, sent.request)):
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
        self._guard(sent.on_response, answer, self.sim.loop.now_ms)
        self._schedule_process_soon()

    # --- controller calls -------------------------------------------------------------------------------

    def _start_controller_call(self, call: ControllerCall, now_ms: int) -> None:
        call_state = _ControllerCallState(call, now_ms + CONTROLLER_CALL_TIMEOUT_MS,
                                          KafkaError("no active controller", ErrorCode.NOT_CONTROLLER))
        self._attempt_controller_call(call_state)

    def _attempt_controller_call(self, call_state: _ControllerCallState) -> None:
        now_ms = self.sim.loop.now_ms
        if now_ms >= call_state.deadline_ms:
            self._finish_controller_call(call_state, call_state.last_error)
            return
        leader_id = self._guard(self.raft.status).leader_id
        if leader_id == self.node_id:
            operation_id = self._guard(self.state.submit_controller_request, call_state.call.request, now_ms)
            self._local_calls[operation_id] = call_state
            self._schedule_process_soon()
            return
        if leader_id is not None and leader_id in self.connections:
            self._next_rpc_id += 1
            payload = cbor2.dumps([self._next_rpc_id, encode_controller_request(call_state.call.request)])
            if self._send(leader_id, CHANNEL_CONTROLLER_REQUEST, payload):
                self._rpc_out[self._next_rpc_id] = (call_state, leader_id)
                return
        self._retry_controller_call(call_state, call_state.last_error)

    def _retry_controller_call(self, call_state: _ControllerCallState, error: KafkaError) -> None:
        call_state.last_error = error
        self.sim.loop.call_later(CONTROLLER_RETRY_BACKOFF_MS * US_PER_MS, self._event,
                                 self._attempt_controller_call, call_state)

    def _controller_answer(self, call_state: _ControllerCallState, response: Any, error: KafkaError | None) -> None:
        if error is not None and (isinstance(error, RaftError) or error.code in RETRIABLE_CONTROLLER_ERRORS):
            self._retry_controller_call(call_state, error)
            return
        self._finish_controller_call(call_state, error if error is not None else response)

    def _finish_controller_call(self, call_state: _ControllerCallState, response: Any) -> None:
        self._guard(self.broker.on_controller_response, call_state.call, response, self.sim.loop.now_ms)
        self._schedule_process_soon()

    def _schedule_process_soon(self) -> None:
        self.sim.loop.call_later(TICK_SPACING_US_MIN, self._event, self._process)

    def _on_controller_outcome(self, outcome: Any) -> None:
        call_state = self._local_calls.pop(outcome.operation_id, None)
        if call_state is not None:
            self._controller_answer(call_state, outcome.response, outcome.error)
            return
        remote = self._rpc_in.pop(outcome.operation_id, None)
        if remote is None:
            return
        peer_id, connection, rpc_id = remote
        if self.connections.get(peer_id) != connection:
            return
        if outcome.error is not None:
            answer = [rpc_id, int(outcome.error.code), str(outcome.error), None, outcome.leader_hint]
        else:
            answer = [rpc_id, 0, "", encode_controller_response(outcome.response), None]
        self._send(peer_id, CHANNEL_CONTROLLER_RESPONSE, cbor2.dumps(answer))

    def _handle_controller_rpc(self, peer_id: int, payload: bytes) -> None:
        rpc_id, encoded = cbor2.loads(payload)
        request = decode_controller_request(encoded)
        leader_id = self._guard(self.raft.status).leader_id
        if leader_id != self.node_id:
            answer = [rpc_id, int(ErrorCode.NOT_CONTROLLER), "not the controller", None, leader_id]
            self._send(peer_id, CHANNEL_CONTROLLER_RESPONSE, cbor2.dumps(answer))
            return
        operation_id = self._guard(self.state.submit_controller_request, request, self.sim.loop.now_ms)
        self._rpc_in[operation_id] = (peer_id, self.connections.get(peer_id, -1), rpc_id)
        self._process()

    def _handle_controller_rpc_response(self, payload: bytes) -> None:
        rpc_id, code, message, encoded, _ = cbor2.loads(payload)
        entry = self._rpc_out.pop(rpc_id, None)
        if entry is None:
            return
        call_state, _ = entry
        if code:
            self._controller_answer(call_state, None, KafkaError(message, ErrorCode(code)))
        else:
            self._controller_answer(call_state, decode_controller_response(encoded), None)

    # --- lifecycle --------------------------------------------------------------------------------------

    def stop(self) -> None:
        self.alive = False
        loop = self.sim.loop
        loop.cancel(self._raft_timer)
        loop.cancel(self._step_timer)
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


class ClusterSimulation(NodeFaultsMixin):
    """The cluster, its disks, network, clients and faults for one seed. Also the FaultTarget.

    Other workloads extend it (simulations/groups_sim.py): `checkers_class`, `extra_bugs` (name -> what the
    workload switches on in `configure_node`), `broker_settings_extra`, and the hooks `_build_clients`,
    `_start_clients`, `_final_checks`, `_heal_everything`, `_lagging` and `_result`."""

    checkers_class = ClusterCheckers
    extra_bugs: dict[str, str] = {}
    broker_settings_extra: dict[str, int] = {}

    def __init__(self, config: RunConfig, trace: Trace, shape: ClusterShape | None = None) -> None:
        self.config = config
        self.loop = EventLoop(config.seed, trace)
        self.node_ids = list(range(1, config.nodes + 1))
        unknown = set(config.bugs_live) - set(BROKER_BUGS) - set(self.extra_bugs) - {"A", "B", "D", "E"}
        if unknown:
            raise ValueError(f"unknown bug switches {sorted(unknown)}: expected A, B, D, E, "
                             f"{', '.join(sorted([*BROKER_BUGS, *self.extra_bugs]))}")
        self.broker_bugs = frozenset(config.bugs_live) & frozenset(BROKER_BUGS)
        self.workload_bugs = frozenset(config.bugs_live) & frozenset(self.extra_bugs)
        self.raft_bugs = frozenset(config.bugs_live) - self.broker_bugs - self.workload_bugs
        faults_on = any(config.fault_rates().values())
        if shape is None:
            swarm = self.loop.derive_rng("swarm")
            shape = ClusterShape(
                records_per_s=swarm.choice(RECORDS_PER_S_CHOICES),
                keyed=swarm.random() < 0.5,
                read_corruption_probability=swarm.choice(READ_CORRUPTION_CHOICES) if faults_on else 0.0,
            )
        self.shape = shape
        self.trace("swarm", shape.records_per_s, int(shape.keyed), f"{shape.read_corruption_probability:g}",
                   ",".join(sorted(config.bugs_live)) or "-")
        self.cluster = cluster_config(self.node_ids, self.broker_settings_extra)
        self.raft_config = simulation_raft_config()
        self.network = Network(self.loop, NetworkConfig())
        self.disks = {n: SimDisk(self.loop.derive_rng(f"disk-{n}")) for n in self.node_ids}
        self.storages = {n: ServingReadCorruption(self.disks[n], self.loop.derive_rng(f"read-corruption-{n}"),
                                                  shape.read_corruption_probability) for n in self.node_ids}
        self.checkers = self.checkers_class()
        self.node_errors: list[str] = []
        self.processes: dict[int, NodeProcess] = {}
        self._incarnations = {n: 0 for n in self.node_ids}
        self._extra_down: set[int] = set()
        self.extra_fault_counts = {"isolate_partition_leader": 0, "controlled_shutdown": 0}
        for node_id in self.node_ids:
            self.network.add_node(node_id)
            self._provision(self.disks[node_id])
        self._build_clients()
        self.faults = FaultSchedule(self.loop, self, config.fault_rates())
        self._extra_rng = self.loop.derive_rng("cluster-faults")
        self._faults_on = faults_on
        self._fault_phase = True

    def _build_clients(self) -> None:
        configs = {"min.insync.replicas": str(min(MIN_INSYNC_REPLICAS, len(self.node_ids))), "flush.messages": "1"}
        replication_factor = min(REPLICATION_FACTOR, len(self.node_ids))
        self.admin = TopicCreator(self, CLIENT_ID_BASE, TOPIC, PARTITIONS, replication_factor, configs)
        self.producers = [
            SimProducer(self, CLIENT_ID_BASE + 1, "all", TOPIC, PARTITIONS, -1, self.shape.keyed,
                        self.shape.records_per_s, self.checkers.observe_ack),
            SimProducer(self, CLIENT_ID_BASE + 2, "one", TOPIC, PARTITIONS, 1, not self.shape.keyed,
                        self.shape.records_per_s, lambda key, offset, value: None),
        ][: self.shape.producers]
        self.consumer = SimConsumer(self, CLIENT_ID_BASE + 9, "reader", TOPIC, PARTITIONS, self.checkers.observe_consumed)
        self.clients = [self.admin, *self.producers, self.consumer]

    def configure_node(self, state: Any) -> None:
        """Switch on this workload's planted bugs in a new node process's state (none here)."""

    @staticmethod
    def _provision(disk: SimDisk) -> None:
        """The node's top-level data directories exist durably before its first start, as an installed
        node's would. Directories the node creates itself (a partition's log directory) are not provisioned:
        whether they survive a power loss is the node's business."""
        disk.makedirs("metadata")
        disk.makedirs("logs")
        disk.fsync_dir("")

    def trace(self, kind: str, *fields: int | str) -> None:
        self.loop.trace.append(self.loop.now_us, kind, *fields)

    # --- FaultTarget ------------------------------------------------------------------------------------

    def is_up(self, node_id: int) -> bool:
        return node_id in self.processes

    def is_running(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and not process.paused

    def _stop(self, node_id: int) -> NodeProcess | None:
        process = self.processes.pop(node_id, None)
        if process is not None:
            process.stop()
            self.network.node_down(node_id)
        return process

    def crash(self, node_id: int) -> None:
        self._stop(node_id)
        self.disks[node_id].crash()

    def power_loss(self, node_id: int) -> None:
        self._stop(node_id)
        self.disks[node_id].power_loss()

    def restart(self, node_id: int) -> None:
        if node_id in self.processes:
            return
        self._extra_down.discard(node_id)
        self._incarnations[node_id] += 1
        self.trace("node.start", node_id, self._incarnations[node_id])
        try:
            process = NodeProcess(self, node_id, self._incarnations[node_id])
        except SimulatedCrash:
            self.trace("node.died_mid_step", node_id)
            self.faults.node_died(node_id)
            return
        except Exception as error:  # a journal, snapshot or log the node cannot start from
            self.node_errors.append(f"node {node_id} at {self.loop.now_ms} ms: restart failed: {_describe(error)}")
            self.trace("node.error", node_id)
            return
        self.processes[node_id] = process
        self.network.node_up(node_id, process)
        process.start()

    def died_mid_step(self, node_id: int, process: NodeProcess) -> None:
        """An armed crash point fired inside a step: the disk already crashed or lost power."""
        if self.processes.get(node_id) is not process:
            return
        self.trace("node.died_mid_step", node_id)
        self._stop(node_id)
        self.faults.node_died(node_id)

    def node_error(self, node_id: int, process: NodeProcess, detail: str) -> None:
        if self.processes.get(node_id) is not process:
            return
        self.node_errors.append(f"node {node_id} at {self.loop.now_ms} ms: {detail}")
        self.trace("node.error", node_id)
        self.crash(node_id)
        self.faults.node_died(node_id)

    def leader_id(self) -> int | None:
        for node_id in self.node_ids:
            process = self.processes.get(node_id)
            if process is not None and not process.paused and process.alive and process.raft.status().is_leader:
                return node_id
        return None

    def stop_cleanly(self, node_id: int, process: NodeProcess) -> None:
        """The end of a controlled shutdown: close the state (checkpoint, flush) and take the node down."""
        if self.processes.get(node_id) is not process:
            return
        try:
            process.close()
        except _NodeDied:
            return
        self._stop(node_id)
        self.disks[node_id].crash()  # the process is gone; its handles with it (nothing is lost)
        self._restart_later(node_id)

    # --- this workload's own faults ---------------------------------------------------------------------

    def _extra_fault_step(self) -> None:
        if not self._fault_phase:
            return
        rng = self._extra_rng
        if rng.random() < ISOLATE_PARTITION_LEADER_RATE:
            self._isolate_partition_leader()
        if rng.random() < CONTROLLED_SHUTDOWN_RATE:
            self._controlled_shutdown()
        self.loop.call_later(EXTRA_FAULT_STEP_MS * US_PER_MS, self._extra_fault_step)

    def _partition_leaders(self) -> list[int]:
        leaders: set[int] = set()
        for process in self.processes.values():
            for hosted in process.broker.partitions.values():
                if hosted.replica.is_leader:
                    leaders.add(process.node_id)
        return sorted(leaders)

    def _isolate_partition_leader(self) -> None:
        leaders = self._partition_leaders()
        if not leaders:
            return
        node_id = self._extra_rng.choice(leaders)
        self.extra_fault_counts["isolate_partition_leader"] += 1
        self.trace("fault.isolate_partition_leader", node_id)
        self.network.isolate(node_id)
        episode_us = self._extra_rng.randint(EXTRA_EPISODE_MS_MIN, EXTRA_EPISODE_MS_MAX) * US_PER_MS
        self.loop.call_later(episode_us, self._heal_if_fault_phase)

    def _heal_if_fault_phase(self) -> None:
        if self._fault_phase:
            self.network.heal()

    def _controlled_shutdown(self) -> None:
        candidates = [n for n in self.node_ids if self.is_running(n) and not self.processes[n].stopping]
        if len(candidates) < len(self.node_ids):
            return  # one node down at a time for this fault: the others keep a quorum
        node_id = self._extra_rng.choice(candidates)
        self.extra_fault_counts["controlled_shutdown"] += 1
        self.trace("fault.controlled_shutdown", node_id)
        self.processes[node_id].begin_controlled_shutdown()

    def _restart_later(self, node_id: int) -> None:
        self._extra_down.add(node_id)
        delay_us = self._extra_rng.randint(EXTRA_EPISODE_MS_MIN, EXTRA_EPISODE_MS_MAX) * US_PER_MS
        self.loop.call_later(delay_us, self._restart_if_down, node_id)

    def _restart_if_down(self, node_id: int) -> None:
        if node_id in self._extra_down and node_id not in self.processes:
            self.restart(node_id)

    # --- the run ----------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        for client in self.clients:
            self.network.add_node(client.client_id)
            self.network.node_up(client.client_id, client)
        for node_id in self.node_ids:
            self.restart(node_id)
        self._start_clients()
        self.faults.start()
        if self._faults_on:
            self.loop.call_later(EXTRA_FAULT_STEP_MS * US_PER_MS, self._extra_fault_step)
        fault_phase_us = int(self.config.duration_s * US_PER_S)
        self.loop.run_until(fault_phase_us)
        self._heal_everything()
        self._check_liveness(fault_phase_us)
        if self.checkers.liveness_ok:
            self._final_checks()
        for client in self.clients:
            client.running = False
        return self._result()

    def _start_clients(self) -> None:
        self.admin.start()
        for client in (*self.producers, self.consumer):
            client.start()

    def _final_checks(self) -> None:
        self.checkers.check_final_logs(self._final_logs())

    def _heal_everything(self) -> None:
        self._fault_phase = False
        self.faults.heal_all()
        for disk in self.disks.values():
            disk.disarm_crash()
        for node_id in sorted(self._extra_down):
            if node_id not in self.processes:
                self.restart(node_id)
        self._extra_down.clear()
        for producer in self.producers:
            producer.generating = False

    def _result(self) -> RunResult:
        stats: dict[str, int | float | str] = {
            "events": self.loop.events_processed,
            "messages": self.network.messages_delivered,
            "faults": sum(self.faults.counts.values()) + sum(self.extra_fault_counts.values()),
            "records_per_s": self.shape.records_per_s,
            "consumed": self.consumer.stats.records,
            "corrupt_batches_refused": self.consumer.stats.corrupt_batches,
            "corrupted_reads": sum(s.corrupted_reads for s in self.storages.values()),
            "follower_hw_regressions": self.checkers.follower_hw_regressions,
        }
        for producer in self.producers:
            stats[f"acked_{producer.name}"] = producer.stats.acked_records
            stats[f"failed_{producer.name}"] = producer.stats.failed_records
        return RunResult(
            seed=self.config.seed,
            trace_sha256=self.loop.trace.sha256(),
            checkers=self.checkers.verdicts(self.node_errors),
            simulated_seconds=self.loop.now_us / US_PER_S,
            stats=stats,
        )

    def _check_liveness(self, healed_us: int) -> None:
        bound_us = healed_us + LIVENESS_MS_MAX * US_PER_MS
        if self.loop.run_until_condition(self._converged, bound_us):
            self.checkers.liveness_ok = True
            self.trace("liveness.ok")
            return
        self.checkers.liveness_detail = f"not converged {LIVENESS_MS_MAX} ms after heal: {self._lagging()}"

    def _converged(self) -> bool:
        return self._lagging() is None

    def _lagging(self) -> str | None:
        """None when converged, else what is still missing (for the liveness verdict)."""
        down = [n for n in self.node_ids if not self.is_running(n)]
        if down:
            return f"nodes {down} not running"
        if not self.admin.created:
            return "topic not created"
        for producer in self.producers:
            if producer.pending_records():
                return f"producer {producer.name} has {producer.pending_records()} records unacknowledged"
        for partition in range(PARTITIONS):
            key = (TOPIC, partition)
            replicas = {n: p.broker.partitions.get(key) for n, p in sorted(self.processes.items())}
            leaders = [n for n, h in replicas.items() if h is not None and h.replica.is_leader]
            if len(leaders) != 1:
                return f"{TOPIC}-{partition} has leaders {leaders}"
            leader = replicas[leaders[0]].replica
            for node_id in leader.replicas:
                hosted = replicas.get(node_id)
                if hosted is None or hosted.log.log_end_offset != leader.log_end_offset \
                        or hosted.replica.high_watermark != leader.log_end_offset:
                    return f"{TOPIC}-{partition} replica {node_id} not caught up with leader {leaders[0]}"
            if self.consumer.position(partition) < leader.high_watermark:
                return f"{TOPIC}-{partition} consumer at {self.consumer.position(partition)} < {leader.high_watermark}"
        return None

    def _final_logs(self) -> dict[tuple[str, int], list[ReplicaLog]]:
        logs: dict[tuple[str, int], list[ReplicaLog]] = {}
        for node_id, process in sorted(self.processes.items()):
            for key in sorted(process.broker.partitions):
                hosted = process.broker.partitions[key]
                logs.setdefault(key, []).append(_replica_log(node_id, hosted))
        return logs


def _replica_log(node_id: int, hosted: Any) -> ReplicaLog:
    log = hosted.log
    batches: list[BatchSummary] = []
    values: dict[int, bytes] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        records = log.read(offset, FINAL_READ_BYTES_MAX).records
        if not records:
            break
        for position, header in iter_batches(records):
            if header.last_offset < offset:
                continue
            batches.append(BatchSummary(header.base_offset, header.last_offset, header.partition_leader_epoch,
                                        header.crc))
            for record in decode_batch(records[position:position + header.size]).records:
                values[record.offset] = bytes(record.value or b"")
            offset = header.last_offset + 1
    return ReplicaLog(node_id, log.log_start_offset, log.log_end_offset, hosted.replica.high_watermark,
                      batches, values)


class _CountingHandler(logging.Handler):
    """Counts pysyncobj's log lines instead of printing thousands of them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def run(config: RunConfig, shape: ClusterShape | None = None,
        simulation_class: type[ClusterSimulation] = ClusterSimulation) -> RunResult:
    """One whole-cluster simulation of `config` (see the module docstring); `shape` overrides the swarm, and
    `simulation_class` is the workload's extension of ClusterSimulation. Raises ValueError for an unknown bug
    switch."""
    sink = open(config.trace_path, "w", encoding="utf-8") if config.trace_path else None
    pysyncobj_logger = logging.getLogger("pysyncobj")
    handler = _CountingHandler()
    propagate = pysyncobj_logger.propagate
    pysyncobj_logger.addHandler(handler)
    pysyncobj_logger.propagate = False
    try:
        result = simulation_class(config, Trace(sink), shape).run()
        result.stats["pysyncobj_log_lines"] = handler.count
        return result
    finally:
        pysyncobj_logger.removeHandler(handler)
        pysyncobj_logger.propagate = propagate
        if sink is not None:
            sink.close()

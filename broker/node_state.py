"""The sans-IO state of one node: Raft driver, controller pipeline, metadata publishing, broker core and
Kafka API handlers, wired together but with no sockets, no trio and no wall clock.

Theory of operation: `NodeState` is what both runtimes drive. The trio node (net/node.py) feeds it real
sockets and the wall clock; the simulator (simulations/) feeds it a simulated network, disk and clock. It
owns the one rule that ties the cores together: committed metadata entries are replayed, in Raft order,
first into the controller state machine and then, as an image delta, into the broker (`_publish`); a Raft
snapshot is the controller's image written as records, and restoring one replaces both.

`step(now_ms)` lets every core advance and returns what the runtime must deliver: whether new Raft entries
were proposed (the runtime should tick the driver soon so they ship), controller outcomes for requests that
`submit_controller_request` queued, Kafka responses that completed, and controller calls the broker wants
made (registration, heartbeats, AlterPartition, forwarded admin requests).
"""

from __future__ import annotations

import uuid

from dataclasses import dataclass, field
from typing import Any, Callable

import cbor2

from metadata.controller import UNCLEAN_CONFIG, ControllerConfig, QuorumController
from metadata.features import TRANSACTION_VERSION
from metadata.image import MetadataDelta, MetadataImage, Provenance
from metadata.records import encode_record
from metadata.requests import DescribeQuorumRequest, DescribeQuorumResponse, QuorumReplica
from security.acl import Authorizer, AuthorizerSettings
import dataclasses

from metadata.records import UserScramCredentialRecord
from broker.core import BrokerCore, BrokerRequest, ControllerCall, InternalFailure
from coordinator.shard import Notice
from broker.config import ClusterConfig, NodeConfig
from broker.controller_core import ControllerCore, ControllerOutcome, decode_records
from broker.apis import KafkaApis
from broker.coordinators import (
    COORDINATOR_KEY_TYPE_GROUP,
    COORDINATOR_KEY_TYPE_TRANSACTION,
    CoordinatorApis,
    CoordinatorService,
    InternalTopic,
)
from broker.groups import GroupApis
from broker.transactions import TransactionApis
from broker.handlers_telemetry import TelemetryApis
from broker.telemetry import ClientMetricsManager
from groupcoord.config import GroupConfig
from groupcoord.shard import GroupCoordinatorShard
from txn.coordinator import TransactionConfig, TransactionCoordinatorShard
from partitions.errors import ErrorCode
from partitions.storage import Storage
from raftlog.driver import RaftDriver
from raftlog.port import RaftConfig

METADATA_DIRECTORY = "metadata"
SNAPSHOT_VERSION = 1
METADATA_LOG_ENTRIES_MAX = 10_000
RPC_KIND_CONTROLLER = "controller"
RPC_KIND_QUORUM_STATUS = "quorum_status"
RPC_KIND_METADATA = "metadata"
RPC_KIND_METADATA_FETCH = "metadata_fetch"  # controller port only: an observer's fetch of committed entries
FETCH_ENTRIES_MAX = 1_000
# How long the quorum leader may hold an observer's fetch that finds nothing new (the request's `wait_ms`, at
# most this): answered at once when an entry is committed, so an observer learns of it without polling (Kafka's
# observers long-poll the leader's Raft Fetch, whose max wait is 500 ms too).
METADATA_FETCH_WAIT_MS_MAX = 500
FETCH_BYTES_MAX = 1024 * 1024  # well below the controller port's 4 MiB frames


@dataclass
class StepOutput:
    proposed: bool = False
    controller_outcomes: list[ControllerOutcome] = field(default_factory=list)
    kafka_completions: list[tuple[int, Any, Any]] = field(default_factory=list)
    controller_calls: list[ControllerCall] = field(default_factory=list)
    broker_requests: list[BrokerRequest] = field(default_factory=list)  # the outbox, for other brokers
    failures: list[InternalFailure] = field(default_factory=list)  # exceptions the broker survived (bugs)
    notices: list[Notice] = field(default_factory=list)  # the coordinators' decisions, for the node's log


class NodeState:
    """One node's cores, sans-IO (see the module docstring)."""

    def __init__(
        self,
        config: ClusterConfig,
        node_id: int,
        storage: Storage,
        rng: Any,
        clock_ms: Callable[[], int],
        incarnation_id: bytes,
        raft_config: RaftConfig | None = None,
        raft_bug_switches: frozenset[str] = frozenset(),
        broker_clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.node_config: NodeConfig = config.node(node_id)
        self.node_id = node_id
        self.storage = storage
        self.rng = rng
        self.clock_ms = clock_ms
        # Two clocks on a real node: the Raft driver and the controller pipeline run on `clock_ms` (monotonic:
        # election timers and proposal deadlines must not jump), the broker, its Kafka APIs and the
        # coordinators on `broker_clock_ms` (milliseconds since the epoch, as Kafka's Time.milliseconds():
        # record timestamps, LogAppendTime, retention.ms and offset commit timestamps are compared with it).
        # The simulator gives both the same virtual clock.
        self.broker_clock_ms = broker_clock_ms or clock_ms
        self.controller_ids = [n.id for n in config.controllers]
        defaults = config.topic_defaults
        default_configs = dict(defaults.configs)  # [topic_defaults.configs]
        settings = config.broker
        self.controller = QuorumController(
            ControllerConfig(
                broker_session_timeout_ms=settings.broker_session_timeout_ms,
                default_num_partitions=defaults.partitions,
                default_replication_factor=defaults.replication_factor,
                auto_leader_rebalance_enable=settings.auto_leader_rebalance_enable,
                leader_imbalance_per_broker_percentage=settings.leader_imbalance_per_broker_percentage,
                leader_imbalance_check_interval_ms=settings.leader_imbalance_check_interval_seconds * 1000,
                bootstrap_features=((TRANSACTION_VERSION, settings.transaction_version),),
                unclean_leader_election_enable=default_configs.get(UNCLEAN_CONFIG, "false") == "true",
            ),
            rng,
        )
        self.metadata_image = MetadataImage()
        # The broker's first delta, accumulating until its registration is replayed (see _publish).
        self._initial_load: MetadataDelta | None = MetadataDelta(MetadataImage())
        self.metadata_log: list[tuple[int, list[Any]]] = []  # recent committed entries, for `metadata dump --log`
        self.broker: BrokerCore | None = None
        self.apis: KafkaApis | None = None
        if self.node_config.is_broker:
            self.broker = BrokerCore(
                node_id,
                self.node_config.host,
                self.node_config.kafka_port,
                self.node_config.roles,
                storage,
                incarnation_id=incarnation_id,
                default_min_insync_replicas=defaults.min_insync_replicas,
                replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
                heartbeat_interval_ms=settings.broker_heartbeat_interval_ms,
                log_flush_messages=settings.log_flush_messages,
                log_flush_ms=settings.log_flush_ms,
                log_retention_check_interval_ms=settings.log_retention_check_interval_ms,
                log_cleaner_step_bytes=settings.log_cleaner_step_bytes,
                rack=self.node_config.rack,
                replica_selector=settings.replica_selector,
                topic_config_defaults=default_configs,
                producer_id_expiration_ms=settings.producer_id_expiration_ms,
            )
            self.apis = KafkaApis(
                self.broker, config.cluster_id, self.controller_id_for_clients,
                auto_create_topics_enable=settings.auto_create_topics_enable,
            )
            self._install_security(config)
            self.coordinators = CoordinatorApis(self.apis)
            self.apis.register(self.coordinators)
            self._add_group_coordinator()
        # A broker-only node is a KRaft observer: no Raft, no vote; it replays the committed entries a
        # controller serves it (`apply_metadata_fetch`). The controllers note each observer's progress.
        self.is_observer = not self.node_config.is_controller
        self.raft: RaftDriver | None = None
        self.controller_core: ControllerCore | None = None
        self.observers: dict[int, tuple[int, int]] = {}  # observer id -> (last index it has, last fetch ms)
        # Observers' fetches this controller answered: with entries (or a snapshot), empty after holding them,
        # empty at once (not the leader, or an observer of an earlier release that asks for no wait)
        self.metadata_fetch_answers = {"entries": 0, "held": 0, "empty": 0}
        self.leader_hint: int | None = None  # observers: the quorum leader the last answer named
        self.quorum_seen: dict | None = None  # observers: the quorum status of the last answer
        self._controller_turn = 0  # observers: the next controller to ask while no leader is known
        if not self.is_observer:
            peers = [other for other in self.controller_ids if other != node_id]
            self.raft = RaftDriver(
                node_id, peers, storage, METADATA_DIRECTORY, clock_ms, rng, self._snapshot, self._restore,
                raft_config or RaftConfig(), bug_switches=raft_bug_switches,
            )
            self.controller_core = ControllerCore(self.controller, self.raft, on_records=self._publish)

    def _install_security(self, config: ClusterConfig) -> None:
        """The authorizer (when [security] turns it on) and, with several listeners, each broker's endpoint
        per listener name (Metadata and FindCoordinator answer with the listener the client came in on)."""
        security = config.security
        if security.authorizer:
            self.apis.authorizer = Authorizer(AuthorizerSettings(frozenset(security.super_users),
                                                                 security.allow_everyone_if_no_acl_found))
        if any(len(node.listeners) > 1 or node.listeners[0].name != "PLAINTEXT" for node in config.brokers):
            self.apis.listener_endpoints = {node.id: {l.name: (l.host, l.port) for l in node.listeners}
                                            for node in config.brokers}

    def _topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name in the current metadata image (a group downgraded by a timer names its partitions)."""
        return {uuid.UUID(bytes=topic.topic_id): name for name, topic in self.broker.image.topics.by_name.items()}

    def _add_group_coordinator(self) -> None:
        settings = self.config.broker
        group_config = GroupConfig(
            session_timeout_ms_min=settings.group_min_session_timeout_ms,
            session_timeout_ms_max=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
            group_max_size=settings.group_max_size,
            consumer_session_timeout_ms=settings.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
            consumer_migration_policy=settings.group_consumer_migration_policy,
            offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
        )
        topic = InternalTopic("__consumer_offsets", settings.offsets_topic_num_partitions,
                              settings.offsets_topic_replication_factor)
        service = CoordinatorService(self.broker, COORDINATOR_KEY_TYPE_GROUP, topic,
                                     lambda partition: GroupCoordinatorShard(partition, group_config,
                                                                             self._topic_names),
                                     min_insync_replicas=self.config.topic_defaults.min_insync_replicas,
                                     configured_brokers=self._configured_brokers())
        self.coordinators.add_service(service)
        self.apis.register(GroupApis(self.apis, self.coordinators, service))
        self._add_transaction_coordinator(service)

    def _configured_brokers(self) -> int:
        return sum(1 for node in self.config.nodes if node.is_broker)

    def _add_transaction_coordinator(self, group_service: CoordinatorService) -> None:
        settings = self.config.broker
        txn_config = TransactionConfig(transaction_max_timeout_ms=settings.transaction_max_timeout_ms,
                                       transactional_id_expiration_ms=settings.transactional_id_expiration_ms)
        topic = InternalTopic("__transaction_state", settings.transaction_state_log_num_partitions,
                              settings.transaction_state_log_replication_factor)
        service = CoordinatorService(self.broker, COORDINATOR_KEY_TYPE_TRANSACTION, topic,
                                     lambda partition: TransactionCoordinatorShard(partition, txn_config),
                                     min_insync_replicas=settings.transaction_state_log_min_isr,
                                     configured_brokers=self._configured_brokers())
        self.coordinators.add_service(service)
        self.transactions = TransactionApis(self.apis, self.coordinators, service, group_service,
                                            settings.transaction_version)
        self.apis.register(self.transactions)
        self.transactions.gate_versions()
        # Client telemetry (KIP-714) is served when the node has a metrics endpoint to show it on.
        self.telemetry = ClientMetricsManager(self.rng)
        self.telemetry_apis = TelemetryApis(self.apis, self.telemetry, self.node_config.metrics_port is not None)
        self.apis.register(self.telemetry_apis)

    # ------------------------------------------------------------------ metadata publishing

    def _publish(self, provenance: Provenance, records: list[Any]) -> None:
        """Committed metadata records, in order: the broker's image advances by one delta.

        The initial load is one delta: until the image holds this broker's own registration (this incarnation's:
        every entry before it is history, replayed from the journal or learned from the leader), the records
        only accumulate, and the broker then applies everything at once against its empty start image, as
        Kafka's first metadata publish does. Applied one by one, history would repeat on disk what already
        happened: a replica moved away and back again would have its current log deleted by the old removal
        and reopened empty by the old re-add, while the current metadata names it leader (found by the
        reassignment simulation). Only the replicas wait: the broker's image stays current meanwhile, so
        SASL credentials, ACLs and Metadata answers do not vanish for the seconds a restart takes."""
        self.metadata_log.append((provenance.raft_index, provenance.raft_term, records))
        del self.metadata_log[:-METADATA_LOG_ENTRIES_MAX]
        delta = MetadataDelta(self.metadata_image)
        for record in records:
            delta.replay(record, provenance)
        self.metadata_image = delta.apply()
        if self.broker is None:
            return
        if self._initial_load is not None:
            for record in records:
                self._initial_load.replay(record, provenance)
            if not self._registered_in(self.metadata_image):
                # What needs no replica on disk follows at once: SASL credentials, ACLs, Metadata answers.
                self.broker.image = self.metadata_image
                return
            delta, self._initial_load = self._initial_load, None
        self.broker.apply_metadata(delta, self.metadata_image, self.broker_clock_ms())

    def _registered_in(self, image: MetadataImage) -> bool:
        registration = image.cluster.broker(self.node_id)
        return registration is not None and registration.incarnation_id == self.broker.incarnation_id

    def _snapshot(self) -> bytes:
        self._drain_committed()  # the snapshot must include every entry pysyncobj counts as applied
        image = self.controller.image()
        records = [encode_record(record) for record in self.controller.snapshot()]
        return cbor2.dumps([SNAPSHOT_VERSION, image.provenance.raft_index, image.provenance.raft_term, records])

    def _restore(self, blob: bytes) -> None:
        version, raft_index, raft_term, encoded = cbor2.loads(blob)
        assert version == SNAPSHOT_VERSION, f"snapshot version {version}"
        records = decode_records(encoded, f"metadata snapshot at entry {raft_index}")
        provenance = Provenance(raft_index=raft_index, raft_term=raft_term)
        self.controller.load_snapshot(records, provenance)
        self.metadata_log.clear()  # the entries it held may not reach the snapshot: observers get the snapshot
        delta = MetadataDelta(MetadataImage())
        for record in records:
            delta.replay(record, provenance)
        image = delta.apply()
        self.metadata_image = image
        if self.broker is not None:
            if self._initial_load is not None and not self._registered_in(image):
                self._initial_load = delta  # still history: the snapshot replaces what accumulated
                self.broker.image = image
            else:
                self._initial_load = None
                self.broker.drop_unassigned_partitions(image, self.broker_clock_ms())
                self.broker.apply_metadata(delta, image, self.broker_clock_ms())
        if self.controller_core is not None:
            self.controller_core.on_snapshot_restored(raft_index)

    def _drain_committed(self) -> None:
        if self.raft is None:
            return
        for index, entry in self.raft.take_committed():
            if index <= self.controller_core.last_applied_index:
                continue  # covered by a snapshot restored meanwhile
            self.controller_core.on_committed(index, entry)

    # ------------------------------------------------------------------ the step

    def step(self, now_ms: int) -> StepOutput:
        """Let every core advance; returns what the runtime must deliver (see the module docstring)."""
        output = StepOutput()
        if self.controller_core is not None:
            self._drain_committed()
            output.proposed = self.controller_core.step(now_ms)
            self._drain_committed()
            output.controller_outcomes = self.controller_core.take_responses()
        if self.broker is not None:
            broker_now_ms = self.broker_clock_ms()
            self.broker.tick(broker_now_ms)
            output.kafka_completions = self.apis.poll(broker_now_ms)
            output.failures = self.broker.take_failures()
            output.notices = self.broker.take_notices()
            output.controller_calls = self.broker.take_controller_requests()
            output.broker_requests = self.broker.take_broker_requests()
        return output

    def after_kafka_event(self, now_ms: int) -> StepOutput:
        """The cheap part of `step`, for after each Kafka request or replica response: deferred Kafka
        responses and controller calls only (no Raft, no timers)."""
        output = StepOutput()
        if self.broker is not None:
            output.kafka_completions = self.apis.poll(now_ms)
            output.failures = self.broker.take_failures()
            output.notices = self.broker.take_notices()
            output.controller_calls = self.broker.take_controller_requests()
            output.broker_requests = self.broker.take_broker_requests()
        return output

    def submit_controller_request(self, request: Any, now_ms: int) -> int:
        """Queue a request for the local controller; its outcome comes out of `step`. Only meaningful on
        the Raft leader (elsewhere it is answered NOT_CONTROLLER). DescribeQuorum is answered at once, by the
        leader, from its Raft progress."""
        if isinstance(request, DescribeQuorumRequest):
            leader_id = self.quorum_leader_id()
            if self.raft is None or leader_id != self.node_id:
                return self.controller_core.refuse_now(leader_id)
            endpoints = {node.id: (node.host, node.controller_port) for node in self.config.nodes}
            return self.controller_core.answer_now(describe_quorum_response(self._quorum_status(now_ms), endpoints))
        return self.controller_core.submit(request, now_ms)

    def controller_id_for_clients(self) -> int:
        """Metadata's and DescribeCluster's ControllerId: this broker, always, as Kafka's KRaft brokers name a
        live broker (never -1, never a controller-only node, which has no Kafka listener). It forwards clients'
        admin requests to the quorum leader (holding them while none is known, up to their timeout) and answers
        once its own image has what the leader had applied (BrokerCore.on_controller_response), so a client
        reads its own writes here. Not the quorum leader: an admin client made just as the leader dies would be
        told of the dead node, and librdkafka waits for the controller it was told of without asking again
        ("Timed out waiting for controller")."""
        return self.node_id

    def quorum_leader_id(self) -> int | None:
        """The metadata quorum's leader as this node knows it (an observer: as the last answer named it)."""
        return self.leader_hint if self.raft is None else self.raft.leadership()[2]

    def controller_moved(self, asked: int) -> bool:
        """Whether a controller call in flight to `asked` should be given up: this node knows another controller
        (a controller that hangs, a paused process, keeps its connections open, and waiting out the call's
        timeout there costs a broker its heartbeats, so its session)."""
        leader_id = self.quorum_leader_id()
        return leader_id is not None and leader_id != asked

    def controller_attempt_ms_max(self) -> int | None:
        """How long an observer waits on one controller before it asks the next (None for a voter, which knows
        a new Raft leader by itself): an observer learns of one only from an answer, and a third of the broker
        session leaves it time to reach another before the session runs out."""
        return None if self.raft is not None else max(500, self.config.broker.broker_session_timeout_ms // 3)

    def controller_to_ask(self, reachable: Callable[[int], bool] = lambda node_id: True) -> int | None:
        """Where a controller request or metadata fetch goes: the quorum leader as this node knows it (None on a
        controller that knows none); an observer that knows no reachable leader asks the controllers in turn."""
        leader_id = self.quorum_leader_id()
        if self.raft is not None or (leader_id is not None and reachable(leader_id)):
            return leader_id
        target = self.controller_ids[self._controller_turn % len(self.controller_ids)]
        self._controller_turn += 1
        return target

    # ------------------------------------------------------------------ observers (broker-only nodes)

    def metadata_fetch_hold_ms(self, request: dict, now_ms: int) -> int:
        """How long the runtime may hold an observer's fetch before it answers it (`metadata_fetch_answer`):
        0 when there is something to answer or this node does not lead the quorum (the answer names the leader
        to ask), else the request's `wait_ms`, at most METADATA_FETCH_WAIT_MS_MAX. A held fetch is answered as
        soon as `metadata_news` changes. Raises KeyError, TypeError or ValueError for a malformed request."""
        start, observer = int(request["from"]), int(request["node_id"])
        wait_ms = min(int(request.get("wait_ms", 0)), METADATA_FETCH_WAIT_MS_MAX)
        if wait_ms <= 0 or self.raft is None or self.quorum_leader_id() != self.node_id:
            return 0
        if start <= self.controller.image().provenance.raft_index:
            return 0
        self.observers[observer] = (start - 1, now_ms)
        return wait_ms

    def metadata_news(self) -> tuple[int, int | None]:
        """What a held observer fetch waits for: a newer committed entry, or another quorum leader."""
        return self.controller.image().provenance.raft_index, self.quorum_leader_id()

    def metadata_fetch_answer(self, request: dict, now_ms: int, held: bool = False) -> dict:
        """A controller's answer to an observer's fetch of the committed entries from index `from`: the
        entries it still holds in order, or its image as a snapshot when the observer is behind them. `held`:
        the runtime held the fetch (metadata_fetch_hold_ms), so the observer may ask again at once."""
        start, observer = int(request["from"]), int(request["node_id"])
        self.observers[observer] = (start - 1, now_ms)
        image = self.controller.image()
        end = image.provenance.raft_index
        answer: dict[str, Any] = {"leader": self.quorum_leader_id(), "snapshot": None, "entries": [],
                                  "status": self._quorum_status(now_ms), "held": held}
        first_held = self.metadata_log[0][0] if self.metadata_log else end + 1
        self.metadata_fetch_answers["entries" if start <= end else "held" if held else "empty"] += 1
        if start < first_held and start <= end:
            answer["snapshot"] = [end, image.provenance.raft_term,
                                  [encode_record(record) for record in self.controller.snapshot()]]
            return answer
        size = 0
        for index, term, records in self.metadata_log:
            if index < start:
                continue
            encoded = [encode_record(record) for record in records]
            size += sum(len(item) for item in encoded)
            if answer["entries"] and (size > FETCH_BYTES_MAX or len(answer["entries"]) >= FETCH_ENTRIES_MAX):
                break
            answer["entries"].append([index, term, encoded])
        return answer

    def metadata_fetch_request(self) -> dict:
        """An observer's next fetch of the metadata log: the entries after its image, held by the quorum
        leader up to METADATA_FETCH_WAIT_MS_MAX while there are none."""
        return {"node_id": self.node_id, "from": self.metadata_image.provenance.raft_index + 1,
                "wait_ms": METADATA_FETCH_WAIT_MS_MAX}

    @staticmethod
    def metadata_fetch_again_at_once(answer: dict, applied: int) -> bool:
        """Whether an observer fetches again at once after `answer` (it brought entries, or the controller held
        the fetch: the wait was there), or after its poll interval (a controller that answers at once: not the
        leader, or an earlier release that holds nothing)."""
        return applied > 0 or bool(answer.get("held"))

    def apply_metadata_fetch(self, answer: dict) -> int:
        """An observer replays what a controller answered; returns how many entries (a snapshot counts one)."""
        self.leader_hint = answer.get("leader")
        self.quorum_seen = answer.get("status")
        applied = 0
        if answer.get("snapshot"):
            index, term, records = answer["snapshot"]
            if index > self.metadata_image.provenance.raft_index:
                self._restore(cbor2.dumps([SNAPSHOT_VERSION, index, term, records]))
                applied += 1
        for index, term, encoded in answer.get("entries", ()):
            if index <= self.metadata_image.provenance.raft_index:
                continue
            records = decode_records(encoded, f"metadata log entry {index}")
            provenance = Provenance(raft_index=index, raft_term=term)
            self.controller.replay_batch(records, provenance)
            self._publish(provenance, records)
            applied += 1
        return applied

    # ------------------------------------------------------------------ the CLI's questions

    def handle_admin(self, request: dict, now_ms: int) -> dict:
        """Quorum status and metadata, asked on the controller port (RPC) or the Kafka port (admin API)."""
        kind = request.get("kind")
        if kind == RPC_KIND_QUORUM_STATUS:
            leader_id = self.quorum_leader_id()
            leader = self.config.node(leader_id) if leader_id in self.controller_ids else None
            return {
                "status": self._quorum_status(now_ms),
                "node_id": self.node_id,
                "leader_kafka": [leader.host, leader.kafka_port] if leader is not None and leader.is_broker else None,
                "leader_controller": [leader.host, leader.controller_port] if leader is not None else None,
                # This node's broker incarnation, as only the node itself knows it: the image may still show
                # the registration of the process before a restart (broker.core.BrokerState).
                "broker": None if self.broker is None else {"state": self.broker.state.name,
                                                            "epoch": self.broker.broker_epoch},
            }
        if kind == RPC_KIND_METADATA:
            image = self.controller.image()
            return {
                "node_id": self.node_id,
                "raft_index": image.provenance.raft_index,
                "raft_term": image.provenance.raft_term,
                "records": [encode_record(redacted(r)) for r in self.controller.snapshot()],
                "log": self._metadata_log() if request.get("log") else None,
            }
        return {"error": int(ErrorCode.INVALID_REQUEST), "message": f"unknown request kind {kind!r}"}

    def _metadata_log(self) -> list[list]:
        """Committed metadata entries since this process started or loaded its last snapshot."""
        return [[index, [encode_record(redacted(r)) for r in records]] for index, _, records in self.metadata_log]

    def _quorum_status(self, now_ms: int) -> dict:
        """The `flotilla quorum status --json` layout: from Raft on a controller; on an observer, the last status
        a controller sent with this node's own progress."""
        if self.raft is not None:
            return quorum_status_dict(self.raft.status(), self.controller_ids, now_ms, self.observers)
        status = dict(self.quorum_seen or {"leader_id": None, "epoch": None, "commit_index": None, "voters": [],
                                           "observers": []})
        own = self.metadata_image.provenance.raft_index
        commit = status.get("commit_index")
        status["observers"] = [o for o in status.get("observers", []) if o["id"] != self.node_id] + [
            {"id": self.node_id, "last_index": own, "lag": None if commit is None else max(0, commit - own),
             "last_contact_ms": 0}]
        return status

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()
        if self.raft is not None:
            self.raft.close()


def quorum_status_dict(status: Any, controller_ids: list[int], now_ms: int,
                       observers: dict[int, tuple[int, int]] | None = None) -> dict:
    """The `flotilla quorum status --json` layout. Progress of the other voters is known on the leader only
    (None elsewhere), and there only once they answered it in its term: a match index of 0 (no entry, where every
    leader's log has its own entry of the term) is a voter not heard from since (pysyncobj starts its response
    time at the election), shown unknown, as Kafka answers a voter that has not fetched from the leader of this
    epoch. Observers (broker-only nodes) as far as this controller has served them."""
    members = {member.id: member for member in status.members}
    voters = []
    for voter_id in sorted(controller_ids):
        member = members.get(voter_id)
        heard = member is not None and bool(member.match_index)
        match_index = status.log_end_index if voter_id == status.node_id else (member.match_index if heard else None)
        last_index = match_index if match_index is not None else -1
        voters.append({
            "id": voter_id,
            "last_index": last_index,
            "lag": max(0, status.raft_commit_index - last_index) if last_index >= 0 else None,
            "last_contact_ms": 0 if voter_id == status.node_id else (
                max(0, now_ms - member.last_contact_ms) if heard and member.last_contact_ms is not None else None),
        })
    return {
        "leader_id": status.leader_id,
        "epoch": status.term,
        "commit_index": status.raft_commit_index,
        "voters": voters,
        "observers": [
            {"id": observer_id, "last_index": last_index, "lag": max(0, status.raft_commit_index - last_index),
             "last_contact_ms": max(0, now_ms - contact_ms)}
            for observer_id, (last_index, contact_ms) in sorted((observers or {}).items())],
    }


def describe_quorum_response(status: dict, endpoints: dict[int, tuple[str, int]]) -> DescribeQuorumResponse:
    """`quorum_status_dict`'s view as the controller answers DescribeQuorum, with the voters' controller
    listeners (`endpoints`: node id -> host, port). Raft indexes count from 1, so the last index of a log is its
    Kafka log end offset and the commit index its high watermark."""

    def replica(member: dict, voter: bool) -> QuorumReplica:
        age = member["last_contact_ms"]
        host, port = endpoints.get(member["id"], ("", 0)) if voter else ("", 0)
        return QuorumReplica(replica_id=member["id"], log_end_offset=member["last_index"],
                             last_fetch_age_ms=-1 if age is None else age, caught_up=member["lag"] == 0,
                             host=host, port=port)

    return DescribeQuorumResponse(
        error_code=ErrorCode.NONE, leader_id=-1 if status["leader_id"] is None else status["leader_id"],
        leader_epoch=status["epoch"], high_watermark=status["commit_index"],
        voters=tuple(replica(voter, True) for voter in status["voters"]),
        observers=tuple(replica(observer, False) for observer in status["observers"]))


def redacted(record: Any) -> Any:
    """The record as the CLI may show it: SCRAM credentials without salt and keys (as Kafka's tools print them)."""
    if isinstance(record, UserScramCredentialRecord):
        return dataclasses.replace(record, salt=b"", stored_key=b"", server_key=b"")
    return record

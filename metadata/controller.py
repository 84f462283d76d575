"""The quorum controller: KRaft's state machine over the metadata log.

Theory of operation (handle / replay, DESIGN.md principle 2):
- `handle(request, now_ms) -> ControllerResult(records, response)` decides. It reads the newest image and
  never changes it. The node proposes `records` to Raft as ONE entry (`encode_record_batch`), so a topic and
  its partitions commit together or not at all, and sends `response` only after the entry commits and
  has been replayed. The response is computed at handle time and describes the state after `records`
  (handle works on a scratch delta holding its own records, so every check sees their effect).
- `replay(record, provenance)` / `replay_batch(records, provenance)` is the only way the image changes; every
  controller (active or standby) and every broker replays the same committed records in the same order and
  reaches the same image.
- `tick(now_ms)` is the periodic work of the active controller, also as a ControllerResult: fence brokers
  whose heartbeat session expired (broker_session_timeout_ms, Kafka's default 9000 ms), and elect leaders
  for offline partitions that can have one again.

The node must run handle -> commit -> replay for one request before handling the next (as Kafka's single
controller event queue does), and a newly elected active controller must first commit a NoOpRecord and
replay everything up to it, then call `become_active(now_ms)`. Otherwise two results computed from the same
image could both commit (two topics with one name); replay asserts catch that loudly.

Soft state. Broker heartbeat sessions are not in the log (as in Kafka's BrokerHeartbeatManager): handling a
BrokerRegistration or BrokerHeartbeat records the time of contact, the one thing `handle` touches; it is
idempotent (handling the same request twice gives the same result) and invisible in the image.
`become_active` gives every registered broker a fresh session, so a failover never fences a live broker.
Sessions count only the time the controller runs: a tick more than STALLED_TICK_GAP_MS after the previous one
(the controller's process was stopped, or its host stalled) moves every session on by the gap, so a controller
back from a stall does not fence the brokers whose heartbeats waited for it.

Broker epochs: a registration gets `max(raft_index + 1, previous epoch + 1)`, where raft_index is the
image's provenance; they grow per broker id and across re-registrations (Kafka uses the registration
record's offset, which we cannot know before the entry commits). A broker is caught up once its
current_metadata_offset reaches the Raft index of the entry holding its RegisterBrokerRecord; only a
caught-up broker is unfenced.

Never imports time, random or I/O; ids come from a seed drawn once from the injected RNG.

Layout (Kafka's control managers): this module holds the dispatch, replay, brokers (registration,
heartbeats, fencing), elections, ISR changes, reassignment and producer ids; topics live in
metadata/topic_control.py, configs in metadata/config_control.py, ACLs and SCRAM credentials in
metadata/security_control.py, client quotas in metadata/quota_control.py, feature levels (UpdateFeatures, the
bootstrap levels a registration writes) in metadata/features.py; metadata/pending.py is the scratch delta every
handler decides on.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable

from metadata.election import partition_change, preferred_leader_change
from metadata.image import (
    EMPTY_IMAGE,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    Provenance,
    TopicsImage,
    image_to_records,
    records_to_image,
)
from metadata.config_control import BROKER_ID_MAX, CLUSTER_DEFAULT_RESOURCE
from metadata.pending import Pending
from metadata.topic_control import partitions_per_topic_max, replication_factor_max
from metadata import reassignment
from metadata.records import (
    NO_LEADER,
    UUID_BYTES,
    BrokerRegistrationChangeRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from metadata import config_control, features, quota_control, security_control, topic_control
from metadata.features import SUPPORTED_FEATURES, TRANSACTION_VERSION, TRANSACTION_VERSION_MAX
from metadata.requests import (
    PRODUCER_ID_BLOCK_SIZE,
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    PartitionResult,
    ReplicaAssignment,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UpdateFeaturesRequest,
)
from partitions.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)

INT64_MAX = 2**63 - 1
broker_id_max = BROKER_ID_MAX
UNCLEAN_CONFIG = "unclean.leader.election.enable"
# Ticks come every few hundred ms (broker/controller_core.py); a longer gap is a stall of the controller itself.
STALLED_TICK_GAP_MS = 1_000


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    broker_session_timeout_ms: int = 9000  # Kafka's broker.session.timeout.ms
    default_num_partitions: int = 1  # Kafka's num.partitions
    default_replication_factor: int = 1  # Kafka's default.replication.factor
    unclean_leader_election_enable: bool = False
    producer_id_block_size: int = PRODUCER_ID_BLOCK_SIZE
    auto_leader_rebalance_enable: bool = True  # Kafka's auto.leader.rebalance.enable
    leader_imbalance_per_broker_percentage: int = 10  # Kafka's leader.imbalance.per.broker.percentage
    leader_imbalance_check_interval_ms: int = 300_000  # Kafka's leader.imbalance.check.interval.seconds
    # The level each feature starts at in a new cluster (written with the first registration; metadata/features.py)
    bootstrap_features: tuple[tuple[str, int], ...] = ((TRANSACTION_VERSION, TRANSACTION_VERSION_MAX),)

    def __post_init__(self) -> None:
        assert self.broker_session_timeout_ms > 0, f"broker_session_timeout_ms={self.broker_session_timeout_ms}"
        assert 1 <= self.default_num_partitions <= partitions_per_topic_max, f"{self.default_num_partitions}"
        assert 1 <= self.default_replication_factor <= replication_factor_max, f"{self.default_replication_factor}"
        assert self.producer_id_block_size >= 1, f"producer_id_block_size={self.producer_id_block_size}"
        assert 0 <= self.leader_imbalance_per_broker_percentage <= 100, f"{self.leader_imbalance_per_broker_percentage}"
        assert self.leader_imbalance_check_interval_ms > 0, f"{self.leader_imbalance_check_interval_ms}"
        for name, level in self.bootstrap_features:
            low, high = SUPPORTED_FEATURES.get(name, (0, 0))
            assert low <= level <= high, f"bootstrap level {level} of {name} outside {low}-{high}"


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerResult:
    """Records to commit (as one Raft entry, in order) and the response to send once they are replayed."""

    records: list[MetadataRecord]
    response: object


@dataclasses.dataclass(frozen=True, slots=True)
class TickResponse:
    fenced_broker_ids: tuple[int, ...] = ()
    elected_partitions: tuple[tuple[str, int], ...] = ()
    balanced_partitions: tuple[tuple[str, int], ...] = ()  # preferred leaders elected by auto rebalance


class QuorumController:
    """KRaft's QuorumController as a pure state machine (see the module docstring)."""

    def __init__(self, config: ControllerConfig, rng) -> None:
        self._config = config
        self._id_seed: bytes = rng.getrandbits(128).to_bytes(16, "big")
        self._image: MetadataImage = EMPTY_IMAGE
        self._sessions: dict[int, int] = {}  # broker_id -> last contact (ms); soft state
        self._active_since_ms: int | None = None
        self._last_tick_ms: int | None = None
        self._registration_offsets: dict[int, int] = {}  # broker_id -> raft index of its registration
        self._next_balance_ms: int | None = None  # soft state: the next automatic leader balance check
        # the leaderless partitions of one TopicsImage, by topic id (derived from the image, so not state)
        self._leaderless: tuple[TopicsImage | None, dict[bytes, frozenset[int]]] = (None, {})
        self.bug_reassign_without_catch_up = False  # a planted bug for the simulator (metadata/reassignment.py)
        self.bug_sessions_count_stalls = False  # planted for the simulator: a stall of the controller costs sessions
        # planted for the simulator (simulations/features_sim.py): every registration writes the bootstrap levels
        self.bug_bootstrap_every_registration = False
        # planted for the simulator (simulations/restarts_sim.py): a registration's previous_broker_epoch is not
        # read, so a whole cluster stopped cleanly waits out the last node's session again
        self.bug_previous_broker_epoch_ignored = False
        self._handlers: dict[type, Callable] = {
            BrokerRegistrationRequest: self._handle_registration,
            BrokerHeartbeatRequest: self._handle_heartbeat,
            UnregisterBrokerRequest: self._handle_unregister,
            CreateTopicsRequest: self._handle_create_topics,
            DeleteTopicsRequest: self._handle_delete_topics,
            CreatePartitionsRequest: self._handle_create_partitions,
            AlterConfigsRequest: self._handle_alter_configs,
            IncrementalAlterConfigsRequest: self._handle_alter_configs,
            AlterPartitionRequest: self._handle_alter_partition,
            AlterPartitionsRequest: self._handle_alter_partitions,
            AllocateProducerIdsRequest: self._handle_allocate_producer_ids,
            ElectLeadersRequest: self._handle_elect_leaders,
            AlterPartitionReassignmentsRequest: self._handle_alter_reassignments,
            CreateAclsRequest: self._handle_create_acls,
            DeleteAclsRequest: self._handle_delete_acls,
            AlterUserScramCredentialsRequest: self._handle_alter_scram,
            AlterClientQuotasRequest: self._handle_alter_client_quotas,
            UpdateFeaturesRequest: self._handle_update_features,
        }

    # ---- state -------------------------------------------------------------------------------------------

    def image(self) -> MetadataImage:
        return self._image

    def snapshot(self) -> list[MetadataRecord]:
        """The current image as records; load with `load_snapshot(records, image().provenance)`."""
        return image_to_records(self._image)

    def load_snapshot(self, records: Iterable[MetadataRecord], provenance: Provenance) -> None:
        """Replace the state with a snapshot's (Raft restores a snapshot before the entries after it)."""
        self._image = records_to_image(records, provenance)
        self._registration_offsets = {b: provenance.raft_index for b in self._image.cluster.brokers}

    def replay(self, record: MetadataRecord, provenance: Provenance | None = None) -> None:
        """Apply one committed record (see MetadataDelta.replay for `provenance`)."""
        self.replay_batch([record], provenance)

    def replay_batch(self, records: Iterable[MetadataRecord], provenance: Provenance | None = None) -> None:
        """Apply the records of one committed Raft entry, all at that entry's provenance."""
        delta = MetadataDelta(self._image)
        registered, unregistered = [], []
        for record in records:
            delta.replay(record, provenance)
            if provenance is None:
                provenance = delta.apply().provenance
            if isinstance(record, RegisterBrokerRecord):
                registered.append(record.broker_id)
            elif isinstance(record, UnregisterBrokerRecord):
                unregistered.append(record.broker_id)
        self._image = delta.apply()
        for broker_id in registered:
            self._registration_offsets[broker_id] = self._image.provenance.raft_index
        for broker_id in unregistered:
            self._registration_offsets.pop(broker_id, None)
            self._sessions.pop(broker_id, None)

    def become_active(self, now_ms: int) -> None:
        """This node is now the active controller: every registered broker gets a fresh session."""
        self._active_since_ms = now_ms
        self._last_tick_ms = now_ms
        self._sessions = {broker_id: now_ms for broker_id in self._image.cluster.brokers}
        self._next_balance_ms = now_ms + self._config.leader_imbalance_check_interval_ms

    # ---- handle ------------------------------------------------------------------------------------------

    def handle(self, request: object, now_ms: int) -> ControllerResult:
        """Decide on a request: the records to commit and the response. Never changes the image.

        Expected failures are error codes in the response. Raises InvalidRequestError for an object that is
        not a controller request.
        """
        handler = self._handlers.get(type(request))
        if handler is None:
            raise InvalidRequestError(f"not a controller request: {type(request).__name__}")
        return handler(request, now_ms)

    def tick(self, now_ms: int) -> ControllerResult:
        """Periodic work: fence brokers whose session expired, elect leaders for offline partitions."""
        pending = Pending(self._image)
        fenced = []
        gap_ms = 0 if self._last_tick_ms is None else now_ms - self._last_tick_ms
        self._last_tick_ms = now_ms
        if gap_ms > STALLED_TICK_GAP_MS and not self.bug_sessions_count_stalls:
            # The controller did not run: the brokers' heartbeats of that time wait to be handled, not missing.
            self._sessions = {broker_id: contact_ms + gap_ms for broker_id, contact_ms in self._sessions.items()}
            if self._active_since_ms is not None:
                self._active_since_ms += gap_ms
        for broker_id, registration in self._image.cluster.brokers.items():
            if not registration.fenced and self._session_expired(broker_id, now_ms):
                fenced.append(broker_id)
                self._fence(pending, broker_id)
        elected = self._elect_offline_partitions(pending)
        balanced = self._maybe_balance_leaders(pending, now_ms)
        return ControllerResult(pending.records, TickResponse(tuple(fenced), tuple(elected), tuple(balanced)))

    # ---- brokers -----------------------------------------------------------------------------------------

    def _session_expired(self, broker_id: int, now_ms: int) -> bool:
        last_contact_ms = self._sessions.get(broker_id, self._active_since_ms)
        if last_contact_ms is None:
            return False  # never active: nobody has been watching this broker yet
        return now_ms > last_contact_ms + self._config.broker_session_timeout_ms

    def _handle_registration(self, request: BrokerRegistrationRequest, now_ms: int) -> ControllerResult:
        error = _registration_error(request)
        existing = self._image.cluster.broker(request.broker_id)
        if error is None and existing is not None and existing.incarnation_id != request.incarnation_id:
            # It owns nothing, or it left cleanly: in a controlled shutdown, or (the shutdown not committed, as when
            # the whole cluster stops) its data directory says the process of that epoch stopped cleanly.
            replaceable = existing.fenced or existing.in_controlled_shutdown or \
                (request.previous_broker_epoch == existing.broker_epoch and not self.bug_previous_broker_epoch_ignored)
            if not replaceable and not self._session_expired(request.broker_id, now_ms):
                error = KafkaError(
                    f"Another broker is registered with broker id {request.broker_id}",
                    ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                )
        bootstrap = dict(self._config.bootstrap_features)
        if error is None:
            reason = features.registration_error(self._image, request.features, bootstrap)
            if reason is not None:
                error = KafkaError(reason, ErrorCode.UNSUPPORTED_VERSION)
        if error is not None:
            return ControllerResult([], BrokerRegistrationResponse(error.code, error.message))
        self._sessions[request.broker_id] = now_ms  # soft state (module docstring)
        record = self._registration_record(request, existing)
        if record is None:  # a retry of the registration in force
            return ControllerResult([], BrokerRegistrationResponse(ErrorCode.NONE, "", existing.broker_epoch))
        pending = Pending(self._image)
        levels = EMPTY_IMAGE if self.bug_bootstrap_every_registration else self._image
        for level_record in features.bootstrap_records(levels, bootstrap):
            pending.emit(level_record)
        pending.emit(record)
        self._move_replicas_away(pending, request.broker_id)
        return ControllerResult(pending.records, BrokerRegistrationResponse(ErrorCode.NONE, "", record.broker_epoch))

    def _registration_record(self, request: BrokerRegistrationRequest, existing) -> RegisterBrokerRecord | None:
        if existing is not None and (
            existing.incarnation_id,
            existing.host,
            existing.port,
            existing.rack,
            existing.roles,
            existing.features,
        ) == (request.incarnation_id, request.host, request.port, request.rack, request.roles, request.features):
            return None
        broker_epoch = self._image.provenance.raft_index + 1
        if existing is not None:
            broker_epoch = max(broker_epoch, existing.broker_epoch + 1)
        return RegisterBrokerRecord(
            broker_id=request.broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=broker_epoch,
            host=request.host,
            port=request.port,
            rack=request.rack,
            roles=request.roles,
            fenced=True,
            features=request.features,
        )

    def _handle_heartbeat(self, request: BrokerHeartbeatRequest, now_ms: int) -> ControllerResult:
        error = self._broker_epoch_error(request.broker_id, request.broker_epoch)
        if error is not None:
            return ControllerResult([], BrokerHeartbeatResponse(error.code, error.message))
        self._sessions[request.broker_id] = now_ms  # soft state (module docstring)
        registration = self._image.cluster.broker(request.broker_id)
        offset = self._registration_offsets.get(request.broker_id, self._image.provenance.raft_index)
        caught_up = request.current_metadata_offset >= offset
        pending = Pending(self._image)
        if registration.in_controlled_shutdown or request.want_shutdown:
            should_shut_down = self._controlled_shutdown(pending, request.broker_id)
        elif registration.fenced:
            should_shut_down = False
            if caught_up and not request.want_fence:
                self._unfence(pending, request.broker_id)
        else:
            should_shut_down = False
            if request.want_fence:
                self._fence(pending, request.broker_id)
        after = pending.delta.broker(request.broker_id)
        response = BrokerHeartbeatResponse(
            ErrorCode.NONE, "", is_caught_up=caught_up, is_fenced=after.fenced, should_shut_down=should_shut_down
        )
        return ControllerResult(pending.records, response)

    def _controlled_shutdown(self, pending: Pending, broker_id: int) -> bool:
        """Move leadership and ISR membership away; True once the broker leads nothing (Kafka's rule)."""
        registration = pending.delta.broker(broker_id)
        if registration.fenced:
            return True  # a fenced broker leads nothing and is in no election: it may go at once
        if not registration.in_controlled_shutdown:
            pending.emit(
                BrokerRegistrationChangeRecord(broker_id, registration.broker_epoch, in_controlled_shutdown=True)
            )
            self._move_replicas_away(pending, broker_id)
        return not any(state.leader == broker_id for _, _, _, state in pending.partitions())

    def _fence(self, pending: Pending, broker_id: int) -> None:
        registration = pending.delta.broker(broker_id)
        pending.emit(BrokerRegistrationChangeRecord(broker_id, registration.broker_epoch, fenced=True))
        self._move_replicas_away(pending, broker_id)

    def _unfence(self, pending: Pending, broker_id: int) -> None:
        registration = pending.delta.broker(broker_id)
        pending.emit(BrokerRegistrationChangeRecord(broker_id, registration.broker_epoch, fenced=False))
        self._elect_offline_partitions(pending)

    def _handle_unregister(self, request: UnregisterBrokerRequest, now_ms: int) -> ControllerResult:
        registration = self._image.cluster.broker(request.broker_id)
        if registration is None:
            code = ErrorCode.BROKER_ID_NOT_REGISTERED
            return ControllerResult([], UnregisterBrokerResponse(code, f"Broker {request.broker_id} is not registered"))
        error = self._unregister_error(request.broker_id, registration)
        if error is not None:
            return ControllerResult([], UnregisterBrokerResponse(error.code, error.message))
        pending = Pending(self._image)
        pending.emit(UnregisterBrokerRecord(request.broker_id, registration.broker_epoch))
        self._move_replicas_away(pending, request.broker_id)
        return ControllerResult(pending.records, UnregisterBrokerResponse(ErrorCode.NONE))

    def _unregister_error(self, broker_id: int, registration) -> KafkaError | None:
        """Decommissioning is refused while the broker runs (it would register again) or still holds
        replicas (reassign them first): each would leave partitions pointing at a broker that is gone."""
        if registration.is_active:
            return InvalidRequestError(
                f"Broker {broker_id} is still running (registered and unfenced): stop it before unregistering it")
        hosted = sorted(f"{name}-{partition}" for name, _, partition, state in Pending(self._image).partitions()
                        if broker_id in state.replicas)
        if hosted:
            shown = ", ".join(hosted[:20]) + (f" and {len(hosted) - 20} more" if len(hosted) > 20 else "")
            return InvalidRequestError(
                f"Broker {broker_id} still holds replicas of {len(hosted)} partitions ({shown}): reassign them first")
        return None

    def _broker_epoch_error(self, broker_id: int, broker_epoch: int) -> KafkaError | None:
        registration = self._image.cluster.broker(broker_id)
        if registration is None:
            return KafkaError(f"Broker {broker_id} is not registered", ErrorCode.BROKER_ID_NOT_REGISTERED)
        if registration.broker_epoch != broker_epoch:
            return KafkaError(
                f"Broker {broker_id} epoch {broker_epoch} is not the registered epoch {registration.broker_epoch}",
                ErrorCode.STALE_BROKER_EPOCH,
            )
        return None

    # ---- leadership ----------------------------------------------------------------------------------------

    def _unclean_allowed(self, delta: MetadataDelta, topic_name: str) -> bool:
        for resource_type, resource_name in (
            (ConfigResourceType.TOPIC, topic_name),
            (ConfigResourceType.BROKER, CLUSTER_DEFAULT_RESOURCE),
        ):
            value = delta.configs(resource_type, resource_name).get(UNCLEAN_CONFIG)
            if value is not None:
                return value.strip().lower() == "true"
        return self._config.unclean_leader_election_enable

    def _move_replicas_away(self, pending: Pending, broker_id: int) -> None:
        """After `broker_id` became unacceptable: leave the ISRs it is in, hand over what it leads."""
        for name, topic_id, partition, state in list(pending.partitions()):
            if broker_id in state.isr or state.leader == broker_id:
                pending.emit(
                    partition_change(
                        topic_id,
                        partition,
                        state,
                        pending.is_active,
                        self._unclean_allowed(pending.delta, name),
                        leaving_isr=broker_id,
                    )
                )

    def _leaderless_in_image(self) -> dict[bytes, frozenset[int]]:
        """The partitions without a leader in the current image, by topic id: worked out once per image (each
        tick would otherwise walk every partition, most of an idle controller's CPU with thousands of them)."""
        topics = self._image.topics
        if self._leaderless[0] is not topics:
            index = {}
            for topic in topics.by_id.values():
                leaderless = frozenset(p for p, state in topic.partitions.items() if state.leader == NO_LEADER)
                if leaderless:
                    index[topic.topic_id] = leaderless
            self._leaderless = (topics, index)
        return self._leaderless[1]

    def _elect_offline_partitions(self, pending: Pending) -> list[tuple[str, int]]:
        elected = []
        # Leaderless in the image, or changed by this batch (a fenced broker's partitions): no other can be.
        for name, topic_id, partition, state in pending.partitions_among(self._leaderless_in_image()):
            if state.leader != NO_LEADER:
                continue
            change = partition_change(
                topic_id, partition, state, pending.is_active, self._unclean_allowed(pending.delta, name)
            )
            if change is not None:
                pending.emit(change)
                elected.append((name, partition))
        return elected

    def _handle_elect_leaders(self, request: ElectLeadersRequest, now_ms: int) -> ControllerResult:
        pending = Pending(self._image)
        results = []
        for name, partition in self._election_targets(request):
            error = self._elect_one(pending, request.election_type, name, partition)
            if error is None:
                results.append(PartitionResult(name, partition, ErrorCode.NONE))
            elif request.partitions is not None:  # for "every partition" Kafka reports only the elections held
                results.append(PartitionResult(name, partition, error.code, error.message))
        return ControllerResult(pending.records, ElectLeadersResponse(ErrorCode.NONE, tuple(results)))

    def _election_targets(self, request: ElectLeadersRequest) -> list[tuple[str, int]]:
        if request.partitions is None:
            return [(t.name, p) for t in self._image.topics.by_name.values() for p in t.partitions]
        return [(tp.topic, p) for tp in request.partitions for p in tp.partitions]

    def _elect_one(self, pending: Pending, election_type: int, name: str, partition: int) -> KafkaError | None:
        topic_id = pending.delta.topic_id(name)
        state = None if topic_id is None else pending.delta.partition(topic_id, partition)
        if state is None:
            return UnknownTopicOrPartitionError(f"Unknown partition {name}-{partition}")
        if election_type == ElectionType.PREFERRED:
            if state.leader == state.replicas[0]:
                return KafkaError("Leader is already the preferred replica", ErrorCode.ELECTION_NOT_NEEDED)
            change = preferred_leader_change(topic_id, partition, state, pending.is_active)
            code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        elif election_type == ElectionType.UNCLEAN:
            if state.leader != NO_LEADER:
                return KafkaError("Partition has a leader", ErrorCode.ELECTION_NOT_NEEDED)
            change = partition_change(topic_id, partition, state, pending.is_active, unclean_allowed=True)
            code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        else:
            return InvalidRequestError(f"Unknown election type {election_type}")
        if change is None:
            return KafkaError(f"No eligible leader for {name}-{partition}", code)
        pending.emit(change)
        return None

    def _maybe_balance_leaders(self, pending: Pending, now_ms: int) -> list[tuple[str, int]]:
        """Automatic preferred leader election (Kafka's auto.leader.rebalance.enable): every check interval,
        for each broker whose share of partitions led by someone else although it is their preferred
        replica passes leader.imbalance.per.broker.percentage, elect it where it is in the ISR."""
        config = self._config
        if not config.auto_leader_rebalance_enable or self._next_balance_ms is None or now_ms < self._next_balance_ms:
            return []
        self._next_balance_ms = now_ms + config.leader_imbalance_check_interval_ms
        preferred: dict[int, list[tuple[str, bytes, int, PartitionRegistration]]] = {}
        for name, topic_id, partition, state in pending.partitions():
            if not reassignment.is_reassigning(state):
                preferred.setdefault(state.replicas[0], []).append((name, topic_id, partition, state))
        balanced = []
        for broker_id, partitions in sorted(preferred.items()):
            imbalanced = [p for p in partitions if p[3].leader != broker_id]
            if not imbalanced or 100 * len(imbalanced) <= config.leader_imbalance_per_broker_percentage * len(partitions):
                continue
            for name, topic_id, partition, state in imbalanced:
                change = preferred_leader_change(topic_id, partition, state, pending.is_active)
                if change is not None:
                    pending.emit(change)
                    balanced.append((name, partition))
        return balanced

    # ---- partition reassignment (metadata/reassignment.py) ---------------------------------------------------

    def _handle_alter_reassignments(self, request: AlterPartitionReassignmentsRequest, now_ms: int) -> ControllerResult:
        pending = Pending(self._image)
        results = []
        for target in request.partitions:
            try:
                pending.emit(self._reassignment_change(pending, target))
                results.append(PartitionResult(target.topic, target.partition, ErrorCode.NONE))
            except KafkaError as error:
                results.append(PartitionResult(target.topic, target.partition, error.code, str(error)))
        return ControllerResult(pending.records, AlterPartitionReassignmentsResponse(ErrorCode.NONE, tuple(results)))

    def _reassignment_change(self, pending: Pending, target) -> PartitionChangeRecord | None:
        topic_id = pending.delta.topic_id(target.topic)
        state = None if topic_id is None else pending.delta.partition(topic_id, target.partition)
        if state is None:
            raise UnknownTopicOrPartitionError(f"Unknown partition {target.topic}-{target.partition}")
        if target.replicas is None:
            if not reassignment.is_reassigning(state):
                raise KafkaError(f"No reassignment of {target.topic}-{target.partition} is in progress",
                                 ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            try:
                return reassignment.cancel_change(topic_id, target.partition, state, pending.is_active,
                                                  self._unclean_allowed(pending.delta, target.topic))
            except ValueError as error:
                raise KafkaError(f"Unable to revert the reassignment of {target.topic}-{target.partition}: {error}",
                                 ErrorCode.INVALID_REPLICA_ASSIGNMENT) from None
        replicas = topic_control.registered_replicas(pending, ReplicaAssignment(target.partition, tuple(target.replicas)))
        return reassignment.start_change(topic_id, target.partition, state, replicas, pending.is_active,
                                         bug_adding_in_sync=self.bug_reassign_without_catch_up)

    # ---- AlterPartition ------------------------------------------------------------------------------------

    def _handle_alter_partition(self, request: AlterPartitionRequest, now_ms: int) -> ControllerResult:
        error = self._broker_epoch_error(request.broker_id, request.broker_epoch)
        state = self._image.topics.partition(request.topic_id, request.partition)
        if error is None:
            error = self._alter_partition_error(request, state)
        if error is not None:
            response = AlterPartitionResponse(error.code, error.message, request.topic_id, request.partition)
            return ControllerResult([], response)
        pending = Pending(self._image)
        if request.new_isr != state.isr:
            pending.emit(PartitionChangeRecord(request.topic_id, request.partition, isr=request.new_isr))
            state = pending.delta.partition(request.topic_id, request.partition)  # a reassignment may complete
        records = pending.records
        response = AlterPartitionResponse(
            ErrorCode.NONE,
            "",
            request.topic_id,
            request.partition,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            isr=state.isr,
        )
        return ControllerResult(records, response)

    def _handle_alter_partitions(self, request: AlterPartitionsRequest, now_ms: int) -> ControllerResult:
        """Each item as a lone AlterPartition would be handled (validated against the committed image; items
        name distinct partitions), their records in one entry."""
        records, responses, seen = [], [], set()
        for item in request.items:
            if (item.broker_id, item.broker_epoch) != (request.broker_id, request.broker_epoch) \
                    or (item.topic_id, item.partition) in seen:
                result = ControllerResult([], AlterPartitionResponse(
                    ErrorCode.INVALID_REQUEST, "an item of another broker or epoch, or a partition named twice",
                    item.topic_id, item.partition))
            else:
                seen.add((item.topic_id, item.partition))
                result = self._handle_alter_partition(item, now_ms)
            records.extend(result.records)
            responses.append(result.response)
        return ControllerResult(records, AlterPartitionsResponse(tuple(responses)))

    def _alter_partition_error(
        self, request: AlterPartitionRequest, state: PartitionRegistration | None
    ) -> KafkaError | None:
        if request.topic_id not in self._image.topics.by_id:
            return KafkaError(f"Unknown topic id {request.topic_id.hex()}", ErrorCode.UNKNOWN_TOPIC_ID)
        if state is None:
            return UnknownTopicOrPartitionError(f"Unknown partition {request.partition}")
        if state.leader != request.broker_id:
            return KafkaError(
                f"Broker {request.broker_id} is not the leader ({state.leader})", ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
        if request.leader_epoch != state.leader_epoch:
            return KafkaError(
                f"Leader epoch {request.leader_epoch} is not the current {state.leader_epoch}",
                ErrorCode.FENCED_LEADER_EPOCH,
            )
        if request.partition_epoch != state.partition_epoch:
            return KafkaError(
                f"Partition epoch {request.partition_epoch} is not the current {state.partition_epoch}",
                ErrorCode.INVALID_UPDATE_VERSION,
            )
        return self._new_isr_error(request.new_isr, state)

    def _new_isr_error(self, new_isr: tuple[int, ...], state: PartitionRegistration) -> KafkaError | None:
        if not new_isr or len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(state.replicas):
            return InvalidRequestError(f"ISR {list(new_isr)} is not a set of the replicas {list(state.replicas)}")
        if state.leader not in new_isr:
            return InvalidRequestError(f"ISR {list(new_isr)} does not contain the leader {state.leader}")
        ineligible = [b for b in new_isr if b not in state.isr and not self._image.cluster.is_active(b)]
        if ineligible:
            return KafkaError(
                f"ISR members {ineligible} are fenced, in controlled shutdown or not registered",
                ErrorCode.INELIGIBLE_REPLICA,
            )
        return None

    # ---- producer ids ----------------------------------------------------------------------------------------

    def _handle_allocate_producer_ids(self, request: AllocateProducerIdsRequest, now_ms: int) -> ControllerResult:
        error = self._broker_epoch_error(request.broker_id, request.broker_epoch)
        start = self._image.producer_ids.next_producer_id
        length = self._config.producer_id_block_size
        if error is None and start > INT64_MAX - length:
            error = KafkaError("Exhausted all producer ids", ErrorCode.UNKNOWN_SERVER_ERROR)
        if error is not None:
            return ControllerResult([], AllocateProducerIdsResponse(error.code, error.message))
        record = ProducerIdsRecord(request.broker_id, request.broker_epoch, start + length)
        return ControllerResult([record], AllocateProducerIdsResponse(ErrorCode.NONE, "", start, length))

    # ---- topics (metadata/topic_control.py) -----------------------------------------------------------------

    def _handle_create_topics(self, request: CreateTopicsRequest, now_ms: int) -> ControllerResult:
        pending = Pending(self._image)
        response = topic_control.create_topics(pending, request, self._config, self._digest)
        return ControllerResult(pending.records, response)

    def _handle_delete_topics(self, request: DeleteTopicsRequest, now_ms: int) -> ControllerResult:
        pending = Pending(self._image)
        response = topic_control.delete_topics(pending, request)
        return ControllerResult(pending.records, response)

    def _handle_create_partitions(self, request: CreatePartitionsRequest, now_ms: int) -> ControllerResult:
        pending = Pending(self._image)
        try:
            added = topic_control.create_partitions(pending, request, self._digest)
        except KafkaError as error:
            return ControllerResult([], CreatePartitionsResponse(request.topic, error.code, error.message))
        if request.validate_only:
            return ControllerResult([], CreatePartitionsResponse(request.topic, ErrorCode.NONE))
        return ControllerResult(pending.records, CreatePartitionsResponse(request.topic, ErrorCode.NONE,
                                                                          partitions_added=added))

    def _digest(self, *parts: bytes) -> bytes:
        position = self._image.provenance.raft_index.to_bytes(8, "big", signed=True)
        hasher = hashlib.blake2b(digest_size=UUID_BYTES, key=self._id_seed)
        for part in (position, *parts):
            hasher.update(len(part).to_bytes(4, "big") + part)
        return hasher.digest()

    # ---- ACLs and SCRAM credentials (metadata/security_control.py) -------------------------------------------

    def _handle_create_acls(self, request: CreateAclsRequest, now_ms: int) -> ControllerResult:
        records, response = security_control.create_acls(
            self._image, request, lambda binding: self._digest(b"acl_id", binding))
        return ControllerResult(records, response)

    def _handle_delete_acls(self, request: DeleteAclsRequest, now_ms: int) -> ControllerResult:
        return ControllerResult(*security_control.delete_acls(self._image, request))

    def _handle_alter_scram(self, request: AlterUserScramCredentialsRequest, now_ms: int) -> ControllerResult:
        return ControllerResult(*security_control.alter_scram_credentials(self._image, request))

    def _handle_alter_client_quotas(self, request: AlterClientQuotasRequest, now_ms: int) -> ControllerResult:
        return ControllerResult(*quota_control.alter_client_quotas(self._image, request))

    def _handle_update_features(self, request: UpdateFeaturesRequest, now_ms: int) -> ControllerResult:
        return ControllerResult(*features.update_features(self._image, request))

    # ---- configs (metadata/config_control.py) -------------------------------------------------------------

    def _handle_alter_configs(
        self, request: AlterConfigsRequest | IncrementalAlterConfigsRequest, now_ms: int
    ) -> ControllerResult:
        return ControllerResult(*config_control.alter_configs(self._image, request))


def _registration_error(request: BrokerRegistrationRequest) -> KafkaError | None:
    if not 0 <= request.broker_id <= broker_id_max:
        return InvalidRequestError(f"Invalid broker id {request.broker_id}")
    if len(request.incarnation_id) != UUID_BYTES:
        return InvalidRequestError(f"incarnation_id must be {UUID_BYTES} bytes")
    if not request.host or not 1 <= request.port <= 65535:
        return InvalidRequestError(f"Invalid endpoint {request.host!r}:{request.port}")
    return None

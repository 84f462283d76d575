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

Broker epochs: a registration gets `max(raft_index + 1, previous epoch + 1)`, where raft_index is the
image's provenance; they grow per broker id and across re-registrations (Kafka uses the registration
record's offset, which we cannot know before the entry commits). A broker is caught up once its
current_metadata_offset reaches the Raft index of the entry holding its RegisterBrokerRecord; only a
caught-up broker is unfenced.

Never imports time, random or I/O; ids come from a seed drawn once from the injected RNG.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator

from metadata.configs import (
    is_list_config,
    split_list,
    validate_broker_config,
    validate_topic_config,
)
from metadata.election import elect_leader, partition_change, preferred_leader_change
from metadata.image import (
    EMPTY_IMAGE,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    Provenance,
    image_to_records,
    records_to_image,
)
from metadata.naming import collision_key, validate_topic_name
from metadata.placement import assign_replicas
from metadata import reassignment
from metadata.records import (
    NO_LEADER,
    UUID_BYTES,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from metadata import security_control
from metadata.requests import (
    PRODUCER_ID_BLOCK_SIZE,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResponse,
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
    ConfigEntry,
    ConfigResource,
    ConfigResourceResult,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    PartitionResult,
    ReplicaAssignment,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from partitions.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    TopicAlreadyExistsError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)

INT64_MAX = 2**63 - 1
replication_factor_max = 32767  # Kafka's INT16 field
partitions_per_topic_max = 100_000
topics_per_request_max = 10_000
broker_id_max = 2**31 - 1
UNCLEAN_CONFIG = "unclean.leader.election.enable"
CLUSTER_DEFAULT_RESOURCE = ""  # the broker resource holding cluster-wide dynamic defaults


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

    def __post_init__(self) -> None:
        assert self.broker_session_timeout_ms > 0, f"broker_session_timeout_ms={self.broker_session_timeout_ms}"
        assert 1 <= self.default_num_partitions <= partitions_per_topic_max, f"{self.default_num_partitions}"
        assert 1 <= self.default_replication_factor <= replication_factor_max, f"{self.default_replication_factor}"
        assert self.producer_id_block_size >= 1, f"producer_id_block_size={self.producer_id_block_size}"
        assert 0 <= self.leader_imbalance_per_broker_percentage <= 100, f"{self.leader_imbalance_per_broker_percentage}"
        assert self.leader_imbalance_check_interval_ms > 0, f"{self.leader_imbalance_check_interval_ms}"


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


class _Pending:
    """The records a handler has decided on so far, replayed on a scratch delta so later checks see them."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.delta = MetadataDelta(image)
        self.records: list[MetadataRecord] = []

    def emit(self, record: MetadataRecord | None) -> None:
        """Decide on `record`. A change that brings a reassigned partition's target into the ISR is followed,
        in the same batch, by the change completing the reassignment (as Kafka's PartitionChangeBuilder)."""
        if record is None:
            return
        self.delta.replay(record)
        self.records.append(record)
        if isinstance(record, PartitionChangeRecord):
            state = self.delta.partition(record.topic_id, record.partition)
            if reassignment.is_reassigning(state):
                self.emit(reassignment.completion_change(record.topic_id, record.partition, state, self.is_active))

    def is_active(self, broker_id: int) -> bool:
        registration = self.delta.broker(broker_id)
        return registration is not None and registration.is_active

    def partitions(self) -> Iterator[tuple[str, bytes, int, PartitionRegistration]]:
        """(topic name, topic id, partition, state) of every partition of the base image's live topics."""
        for topic in self.image.topics.by_name.values():
            for partition in topic.partitions:
                state = self.delta.partition(topic.topic_id, partition)
                if state is not None:
                    yield topic.name, topic.topic_id, partition, state


class QuorumController:
    """KRaft's QuorumController as a pure state machine (see the module docstring)."""

    def __init__(self, config: ControllerConfig, rng) -> None:
        self._config = config
        self._id_seed: bytes = rng.getrandbits(128).to_bytes(16, "big")
        self._image: MetadataImage = EMPTY_IMAGE
        self._sessions: dict[int, int] = {}  # broker_id -> last contact (ms); soft state
        self._active_since_ms: int | None = None
        self._registration_offsets: dict[int, int] = {}  # broker_id -> raft index of its registration
        self._next_balance_ms: int | None = None  # soft state: the next automatic leader balance check
        self.bug_reassign_without_catch_up = False  # a planted bug for the simulator (metadata/reassignment.py)
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
        pending = _Pending(self._image)
        fenced = []
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
            replaceable = existing.fenced or existing.in_controlled_shutdown  # owns nothing, or left cleanly
            if not replaceable and not self._session_expired(request.broker_id, now_ms):
                error = KafkaError(
                    f"Another broker is registered with broker id {request.broker_id}",
                    ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                )
        if error is not None:
            return ControllerResult([], BrokerRegistrationResponse(error.code, error.message))
        self._sessions[request.broker_id] = now_ms  # soft state (module docstring)
        record = self._registration_record(request, existing)
        if record is None:  # a retry of the registration in force
            return ControllerResult([], BrokerRegistrationResponse(ErrorCode.NONE, "", existing.broker_epoch))
        pending = _Pending(self._image)
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
        ) == (request.incarnation_id, request.host, request.port, request.rack, request.roles):
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
        )

    def _handle_heartbeat(self, request: BrokerHeartbeatRequest, now_ms: int) -> ControllerResult:
        error = self._broker_epoch_error(request.broker_id, request.broker_epoch)
        if error is not None:
            return ControllerResult([], BrokerHeartbeatResponse(error.code, error.message))
        self._sessions[request.broker_id] = now_ms  # soft state (module docstring)
        registration = self._image.cluster.broker(request.broker_id)
        offset = self._registration_offsets.get(request.broker_id, self._image.provenance.raft_index)
        caught_up = request.current_metadata_offset >= offset
        pending = _Pending(self._image)
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

    def _controlled_shutdown(self, pending: _Pending, broker_id: int) -> bool:
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

    def _fence(self, pending: _Pending, broker_id: int) -> None:
        registration = pending.delta.broker(broker_id)
        pending.emit(BrokerRegistrationChangeRecord(broker_id, registration.broker_epoch, fenced=True))
        self._move_replicas_away(pending, broker_id)

    def _unfence(self, pending: _Pending, broker_id: int) -> None:
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
        pending = _Pending(self._image)
        pending.emit(UnregisterBrokerRecord(request.broker_id, registration.broker_epoch))
        self._move_replicas_away(pending, request.broker_id)
        return ControllerResult(pending.records, UnregisterBrokerResponse(ErrorCode.NONE))

    def _unregister_error(self, broker_id: int, registration) -> KafkaError | None:
        """Decommissioning is refused while the broker runs (it would register again) or still holds
        replicas (reassign them first): each would leave partitions pointing at a broker that is gone."""
        if registration.is_active:
            return InvalidRequestError(
                f"Broker {broker_id} is still running (registered and unfenced): stop it before unregistering it")
        hosted = sorted(f"{name}-{partition}" for name, _, partition, state in _Pending(self._image).partitions()
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

    def _move_replicas_away(self, pending: _Pending, broker_id: int) -> None:
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

    def _elect_offline_partitions(self, pending: _Pending) -> list[tuple[str, int]]:
        elected = []
        for name, topic_id, partition, state in list(pending.partitions()):
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
        pending = _Pending(self._image)
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

    def _elect_one(self, pending: _Pending, election_type: int, name: str, partition: int) -> KafkaError | None:
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

    def _maybe_balance_leaders(self, pending: _Pending, now_ms: int) -> list[tuple[str, int]]:
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
        pending = _Pending(self._image)
        results = []
        for target in request.partitions:
            try:
                pending.emit(self._reassignment_change(pending, target))
                results.append(PartitionResult(target.topic, target.partition, ErrorCode.NONE))
            except KafkaError as error:
                results.append(PartitionResult(target.topic, target.partition, error.code, str(error)))
        return ControllerResult(pending.records, AlterPartitionReassignmentsResponse(ErrorCode.NONE, tuple(results)))

    def _reassignment_change(self, pending: _Pending, target) -> PartitionChangeRecord | None:
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
        replicas = self._registered_replicas(pending, ReplicaAssignment(target.partition, tuple(target.replicas)))
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
        pending = _Pending(self._image)
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

    # ---- topics ------------------------------------------------------------------------------------------

    def _handle_create_topics(self, request: CreateTopicsRequest, now_ms: int) -> ControllerResult:
        pending = _Pending(self._image)
        names = [topic.name for topic in request.topics]
        results = []
        for topic in request.topics:
            try:
                if len(names) > topics_per_request_max:
                    raise InvalidRequestError(f"More than {topics_per_request_max} topics in one request")
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(f"Duplicate topic name {topic.name!r} in the request")
                results.append(self._create_topic(pending, topic, request.validate_only))
            except KafkaError as error:
                results.append(CreatableTopicResult(topic.name, error.code, error.message))
        return ControllerResult(pending.records, CreateTopicsResponse(tuple(results)))

    def _create_topic(self, pending: _Pending, topic: CreatableTopic, validate_only: bool) -> CreatableTopicResult:
        validate_topic_name(topic.name)
        self._check_topic_name_free(pending, topic.name)
        if topic.assignments is not None:
            assignments = self._manual_assignments(pending, topic)
        else:
            assignments = self._placed_assignments(pending, topic)
        replication_factor = min(len(replicas) for replicas in assignments)
        configs = _topic_configs(topic.configs, replication_factor)
        topic_id = self._new_topic_id(pending, topic.name)
        if not validate_only:
            pending.emit(TopicRecord(topic.name, topic_id))
            for partition, replicas in enumerate(assignments):
                pending.emit(_new_partition_record(pending, topic_id, partition, replicas))
            for name, value in configs:
                pending.emit(ConfigRecord(ConfigResourceType.TOPIC, topic.name, name, value))
        return CreatableTopicResult(
            topic.name,
            ErrorCode.NONE,
            "",
            topic_id=topic_id,
            num_partitions=len(assignments),
            replication_factor=replication_factor,
            configs=tuple(ConfigEntry(name, value) for name, value in configs),
        )

    def _check_topic_name_free(self, pending: _Pending, name: str) -> None:
        if pending.delta.topic_id(name) is not None:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = collision_key(name)
        taken = list(self._image.topics.by_name) + [r.name for r in pending.records if isinstance(r, TopicRecord)]
        for other in taken:
            if collision_key(other) == key and pending.delta.topic_id(other) is not None:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")

    def _placed_assignments(self, pending: _Pending, topic: CreatableTopic) -> list[tuple[int, ...]]:
        num_partitions = topic.num_partitions
        if num_partitions == -1:
            num_partitions = self._config.default_num_partitions
        replication_factor = topic.replication_factor
        if replication_factor == -1:
            replication_factor = self._config.default_replication_factor
        if not 1 <= num_partitions <= partitions_per_topic_max:
            raise InvalidPartitionsError(
                f"Number of partitions was set to an invalid value {num_partitions} "
                f"(must be 1..{partitions_per_topic_max})"
            )
        return self._place(pending, topic.name, 0, num_partitions, replication_factor)

    def _place(
        self, pending: _Pending, name: str, first_partition: int, count: int, replication_factor: int
    ) -> list[tuple[int, ...]]:
        brokers = {b: pending.delta.broker(b).rack for b in self._active_brokers(pending)}
        if not 1 <= replication_factor <= replication_factor_max:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered."
            )
        digest = self._digest(b"placement", name.encode())
        start_index = int.from_bytes(digest[:8], "big") % len(brokers)
        replica_shift = int.from_bytes(digest[8:], "big") % len(brokers)
        return assign_replicas(brokers, count, replication_factor, start_index, replica_shift, first_partition)

    def _active_brokers(self, pending: _Pending) -> list[int]:
        return [b for b in self._image.cluster.brokers if pending.is_active(b)]

    def _manual_assignments(self, pending: _Pending, topic: CreatableTopic) -> list[tuple[int, ...]]:
        for value, what in ((topic.num_partitions, "numPartitions"), (topic.replication_factor, "replicationFactor")):
            if value != -1:
                raise InvalidRequestError(f"A manual partition assignment was given, so {what} must be -1")
        assignments = sorted(topic.assignments, key=lambda a: a.partition)
        if [a.partition for a in assignments] != list(range(len(assignments))) or not assignments:
            raise KafkaError(
                "Partitions of a manual assignment must be numbered 0..n-1", ErrorCode.INVALID_REPLICA_ASSIGNMENT
            )
        if len(assignments) > partitions_per_topic_max:
            raise InvalidPartitionsError(f"More than {partitions_per_topic_max} partitions")
        return [self._checked_replicas(pending, a) for a in assignments]

    def _checked_replicas(self, pending: _Pending, assignment: ReplicaAssignment) -> tuple[int, ...]:
        replicas = self._registered_replicas(pending, assignment)
        if not any(pending.is_active(b) for b in replicas):
            raise KafkaError(
                f"All brokers specified in the manual partition assignment for partition {assignment.partition} "
                "are fenced or in controlled shutdown.",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        return replicas

    @staticmethod
    def _registered_replicas(pending: _Pending, assignment: ReplicaAssignment) -> tuple[int, ...]:
        """A manual replica list (topic creation, new partitions, reassignment): not empty, no duplicate,
        every broker registered (Kafka's validateManualPartitionAssignment). Raises INVALID_REPLICA_ASSIGNMENT."""
        replicas = assignment.broker_ids
        if not replicas or len(set(replicas)) != len(replicas) or len(replicas) > replication_factor_max:
            raise KafkaError(
                f"Partition {assignment.partition} has an empty or duplicated replica list {list(replicas)}",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        unknown = [b for b in replicas if pending.delta.broker(b) is None]
        if unknown:
            raise KafkaError(
                f"The manual partition assignment includes broker(s) {unknown}, but no such broker is registered.",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        return tuple(replicas)

    def _new_topic_id(self, pending: _Pending, name: str) -> bytes:
        """A 16-byte id derived from the seed, the log position and the name: unique, never all zero."""
        for attempt in range(1_000):
            topic_id = self._digest(b"topic_id", name.encode(), attempt.to_bytes(4, "big"))
            if any(topic_id) and pending.delta.topic_name(topic_id) is None:
                return topic_id
        raise AssertionError(f"no free topic id for {name!r} after 1000 attempts")

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

    def _handle_delete_topics(self, request: DeleteTopicsRequest, now_ms: int) -> ControllerResult:
        pending = _Pending(self._image)
        results = []
        for name in request.names:
            topic_id = pending.delta.topic_id(name)
            if request.names.count(name) > 1:
                results.append(DeletableTopicResult(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name"))
            elif topic_id is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(DeletableTopicResult(name, code, "This server does not host this topic."))
            else:
                pending.emit(RemoveTopicRecord(topic_id))
                results.append(DeletableTopicResult(name, ErrorCode.NONE, "", topic_id))
        return ControllerResult(pending.records, DeleteTopicsResponse(tuple(results)))

    def _handle_create_partitions(self, request: CreatePartitionsRequest, now_ms: int) -> ControllerResult:
        pending = _Pending(self._image)
        try:
            self._create_partitions(pending, request)
        except KafkaError as error:
            return ControllerResult([], CreatePartitionsResponse(request.topic, error.code, error.message))
        records = [] if request.validate_only else pending.records
        return ControllerResult(records, CreatePartitionsResponse(request.topic, ErrorCode.NONE))

    def _create_partitions(self, pending: _Pending, request: CreatePartitionsRequest) -> None:
        topic = self._image.topics.by_name.get(request.topic)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{request.topic}' does not exist")
        current = len(topic.partitions)
        if request.new_total_count <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than or equal to the requested "
                f"{request.new_total_count}."
            )
        if request.new_total_count > partitions_per_topic_max:
            raise InvalidPartitionsError(f"More than {partitions_per_topic_max} partitions")
        replication_factor = len(topic.partitions[0].replicas)
        count = request.new_total_count - current
        if request.assignments is None:
            assignments = self._place(pending, topic.name, current, count, replication_factor)
        else:
            assignments = self._new_partition_assignments(pending, request, current, replication_factor)
        for offset, replicas in enumerate(assignments):
            pending.emit(_new_partition_record(pending, topic.topic_id, current + offset, replicas))

    def _new_partition_assignments(
        self, pending: _Pending, request: CreatePartitionsRequest, current: int, replication_factor: int
    ) -> list[tuple[int, ...]]:
        if len(request.assignments) != request.new_total_count - current:
            raise KafkaError(
                f"Increasing the number of partitions by {request.new_total_count - current} but "
                f"{len(request.assignments)} assignments provided.",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        assignments = []
        for offset, assignment in enumerate(request.assignments):
            replicas = self._checked_replicas(pending, ReplicaAssignment(current + offset, assignment.broker_ids))
            if len(replicas) != replication_factor:
                raise KafkaError(
                    f"Inconsistent replication factor: the topic has {replication_factor}, partition "
                    f"{current + offset} would have {len(replicas)}",
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
            assignments.append(replicas)
        return assignments

    # ---- configs -------------------------------------------------------------------------------------------

    def _handle_alter_configs(
        self, request: AlterConfigsRequest | IncrementalAlterConfigsRequest, now_ms: int
    ) -> ControllerResult:
        incremental = isinstance(request, IncrementalAlterConfigsRequest)
        keys = [(r.resource_type, r.resource_name) for r in request.resources]
        records: list[MetadataRecord] = []
        results = []
        for resource in request.resources:
            try:
                if keys.count((resource.resource_type, resource.resource_name)) > 1:
                    raise InvalidRequestError(f"Duplicate resource {resource.resource_name!r} in the request")
                changes = self._config_changes(resource, incremental)
                if not request.validate_only:
                    records.extend(changes)
                results.append(ConfigResourceResult(resource.resource_type, resource.resource_name, ErrorCode.NONE))
            except KafkaError as error:
                results.append(
                    ConfigResourceResult(resource.resource_type, resource.resource_name, error.code, error.message)
                )
        return ControllerResult(records, AlterConfigsResponse(tuple(results)))

    def _config_changes(self, resource: ConfigResource, incremental: bool) -> list[ConfigRecord]:
        """The ConfigRecords that take `resource` to its requested configs. Raises KafkaError."""
        is_topic, replication_factor = self._config_resource(resource)
        current = dict(self._image.configs.get(resource.resource_type, resource.resource_name))
        if incremental:
            wanted = _apply_config_ops(current, resource.configs, is_topic)
        else:
            wanted = _replacement_configs(resource.configs)
        for name, value in wanted.items():
            if current.get(name) != value:
                if is_topic:
                    validate_topic_config(name, value, replication_factor)
                else:
                    validate_broker_config(name, value)
        changed = sorted(set(current) | set(wanted))
        return [
            ConfigRecord(resource.resource_type, resource.resource_name, name, wanted.get(name))
            for name in changed
            if current.get(name) != wanted.get(name)
        ]

    def _config_resource(self, resource: ConfigResource) -> tuple[bool, int | None]:
        """(is it a topic, its replication factor). Raises KafkaError for an unknown or bad resource."""
        if resource.resource_type == ConfigResourceType.TOPIC:
            topic = self._image.topics.by_name.get(resource.resource_name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"Topic '{resource.resource_name}' does not exist")
            return True, min((len(p.replicas) for p in topic.partitions.values()), default=None)
        if resource.resource_type == ConfigResourceType.BROKER:
            name = resource.resource_name
            if name != CLUSTER_DEFAULT_RESOURCE and not (name.isdigit() and int(name) <= broker_id_max):
                raise InvalidRequestError(f"Broker resource name must be empty or a broker id, not {name!r}")
            return False, None
        raise InvalidRequestError(f"Unsupported config resource type {resource.resource_type}")


def _registration_error(request: BrokerRegistrationRequest) -> KafkaError | None:
    if not 0 <= request.broker_id <= broker_id_max:
        return InvalidRequestError(f"Invalid broker id {request.broker_id}")
    if len(request.incarnation_id) != UUID_BYTES:
        return InvalidRequestError(f"incarnation_id must be {UUID_BYTES} bytes")
    if not request.host or not 1 <= request.port <= 65535:
        return InvalidRequestError(f"Invalid endpoint {request.host!r}:{request.port}")
    return None


def _new_partition_record(
    pending: _Pending, topic_id: bytes, partition: int, replicas: tuple[int, ...]
) -> PartitionRecord:
    """A new partition: the ISR is its active replicas, the leader the first of them (in replica order)."""
    isr = tuple(b for b in replicas if pending.is_active(b))
    assert isr, f"partition {partition}: no active replica in {replicas}"
    leader, isr = elect_leader(replicas, isr, pending.is_active, unclean_allowed=False)
    return PartitionRecord(topic_id, partition, replicas, isr, leader, leader_epoch=0, partition_epoch=0)


def _topic_configs(entries: tuple[ConfigEntry, ...], replication_factor: int) -> list[tuple[str, str]]:
    """The validated configs of a new topic. Raises InvalidConfigError / InvalidRequestError."""
    names = [entry.name for entry in entries]
    configs = []
    for entry in entries:
        if names.count(entry.name) > 1:
            raise InvalidRequestError(f"Duplicate config {entry.name} in the request")
        if entry.value is None:
            raise InvalidConfigError(f"Null value not supported for topic config {entry.name}")
        validate_topic_config(entry.name, entry.value, replication_factor)
        configs.append((entry.name, entry.value))
    return sorted(configs)


def _replacement_configs(entries: tuple[AlterableConfig, ...]) -> dict[str, str]:
    wanted = {}
    for entry in entries:
        if entry.name in wanted:
            raise InvalidRequestError(f"Duplicate config {entry.name} in the request")
        if entry.value is None:
            raise InvalidConfigError(f"Null value not supported for config {entry.name}")
        wanted[entry.name] = entry.value
    return wanted


def _apply_config_ops(current: dict[str, str], entries: tuple[AlterableConfig, ...], is_topic: bool) -> dict[str, str]:
    """Kafka's IncrementalAlterConfigs: SET, DELETE, and APPEND / SUBTRACT for LIST keys."""
    wanted = dict(current)
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise InvalidRequestError(f"Duplicate config {entry.name} in the request")
        seen.add(entry.name)
        if entry.op == AlterConfigOp.DELETE:
            wanted.pop(entry.name, None)
            continue
        if entry.op not in (AlterConfigOp.SET, AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise InvalidRequestError(f"Unknown config operation {entry.op} for {entry.name}")
        if entry.value is None:
            raise InvalidConfigError(f"Null value not supported for config {entry.name}")
        if entry.op == AlterConfigOp.SET:
            wanted[entry.name] = entry.value
            continue
        if not is_list_config(is_topic, entry.name):
            raise InvalidConfigError(
                f"Can't {AlterConfigOp(entry.op).name} to key {entry.name} because its type is not LIST."
            )
        items = list(split_list(wanted.get(entry.name, "")))
        if entry.op == AlterConfigOp.APPEND:
            items += [item for item in split_list(entry.value) if item not in items]
        else:
            items = [item for item in items if item not in split_list(entry.value)]
        wanted[entry.name] = ",".join(items)
    return wanted

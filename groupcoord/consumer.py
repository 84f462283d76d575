"""The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat), sans-IO.

Theory of operation (Kafka's ConsumerGroup, CurrentAssignmentBuilder and the consumer half of
GroupMetadataManager). A consumer group has a *group epoch*, bumped whenever what the assignment depends on
changes (a member joins or leaves, a subscription changes, a subscribed topic gains partitions), and a
*target assignment* computed by a server-side assignor (groupcoord/assignors.py) at an *assignment epoch*.
Each member has its own *member epoch* and moves towards its target one step at a time, driven by its
heartbeats, so that a partition never has two owners:

- STABLE: the member owns its target at the assignment epoch. When the target moves on, it keeps the
  partitions it owns that are still in its target; if it must give any up it stays at its epoch, in
  UNREVOKED_PARTITIONS, and the response leaves them out of its assignment.
- UNREVOKED_PARTITIONS: it waits until the member's heartbeat no longer lists the revoked partitions as
  owned; then the member moves to the next epoch. If it does not revoke within its rebalance timeout, it is
  fenced (removed).
- A partition of the target that another member still owns (assigned or pending revocation) is *unreleased*:
  the member takes the target epoch without it (UNRELEASED_PARTITIONS) and receives it on a later heartbeat,
  once the old owner has let it go.

Member epochs are checked on every heartbeat: a greater epoch than the coordinator's, or a smaller one that
is not the previous epoch with a subset of the current assignment (a lost response), is FENCED_MEMBER_EPOCH;
the member must give up its partitions and rejoin with epoch 0. A static member (`InstanceId`) that leaves
with epoch -2 keeps its assignment for its session; rejoining under a new member id takes it over, while a
second live member with the same instance id gets UNRELEASED_INSTANCE_ID.

Classic members (KIP-848's online migration): a consumer of the classic protocol in a consumer group is a
member like the others, with its session timeout and JoinGroup protocols kept (`ClassicMeta`, written in its
member record). Its JoinGroup is a full heartbeat that reports the partitions its subscription says it owns
(none for an eager client, which gave them all up); the answer names its member epoch as the generation, and
SyncGroup gives it its current assignment in the embedded consumer protocol. Its Heartbeat answers
REBALANCE_IN_PROGRESS while it must join again to move on (the group epoch passed its own, it has partitions to
revoke, or partitions it waits for were released); it commits with its member epoch as the generation.

Durable state changes only by `replay` of the records in groupcoord/consumer_records.py, written by
`heartbeat` and `fence` as Kafka writes them; timers (sessions, revocation deadlines) live in the shard.
Offset commits from members are checked against the member epoch (STALE_MEMBER_EPOCH).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from coordinator.shard import CoordinatorRecord
from groupcoord import consumer_records as cr
from groupcoord.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment
from groupcoord.config import GroupConfig
from groupcoord.consumer_protocol import decode_subscription, encode_assignment
from net.protocol import messages
from partitions.errors import ErrorCode, KafkaError

LEAVE_GROUP_MEMBER_EPOCH = -1
PROTOCOL_TYPE = "consumer"
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
REGEX_LENGTH_MAX = 1_000


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its byte values (written in CurrentMemberAssignment records)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True)
class ClassicMeta:
    """A member that speaks the classic protocol inside a consumer group (KIP-848's online migration): its
    session timeout and its JoinGroup protocols (name, ConsumerProtocolSubscription bytes), in its order."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    revoking: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    classic: ClassicMeta | None = None  # a classic member (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)

    def subscription(self) -> tuple:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic)

    @property
    def session_timeout_ms(self) -> int | None:
        """A classic member's own session timeout (None: the group's, for consumer-protocol members)."""
        return self.classic.session_timeout_ms if self.classic is not None else None

    def assignment_state(self) -> tuple:
        return (self.member_epoch, self.previous_member_epoch, self.state, _frozen(self.assigned),
                _frozen(self.revoking))


@dataclass(frozen=True)
class TopicInfo:
    """What the coordinator needs of a topic from the metadata image."""

    topic_id: uuid.UUID
    partitions: int


@dataclass
class HeartbeatOutcome:
    records: list[CoordinatorRecord] = field(default_factory=list)
    response: Any = None
    member: ConsumerMember | None = None  # the member as the records leave it (None: removed)


class ConsumerGroup:
    """One consumer-protocol group (see the module docstring). `group_type` is "consumer"."""

    group_type = "consumer"
    protocol_type = "consumer"
    # Test-only planted bug for the simulator's checkers (simulations/groups_sim.py); never configured:
    # a partition still owned by another member is handed to its new owner at once (no unreleased wait).
    bug_assign_unreleased_partitions = False
    # Planted bug `partition_metadata_volatile` (the former code): the subscribed topics' metadata is not
    # written, so a coordinator that loads the group bumps its epoch at the first heartbeat after every failover.
    bug_partition_metadata_volatile = False

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        # The subscribed topics' ids and partition counts the target was computed for, by name: written and
        # replayed as ConsumerGroupPartitionMetadata (None: never written, so the next heartbeat bumps the epoch).
        self.subscription_metadata: dict[str, TopicInfo] | None = None
        self.state_timestamp_ms = -1

    # --- views ----------------------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def partition_owners(self) -> dict[tuple[uuid.UUID, int], str]:
        """Who owns each partition now (assigned or pending revocation): the checkers' and describe's view."""
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for member in self.members.values():
            for assignment in (member.assigned, member.revoking):
                for topic_id, partitions in assignment.items():
                    for partition in partitions:
                        owners[(topic_id, partition)] = member.member_id
        return owners

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to by name (OffsetDelete refuses those); None with a regex member,
        whose interest cannot be listed."""
        if any(member.subscribed_topic_regex for member in self.members.values()):
            return None
        return {name for member in self.members.values() for name in member.subscribed_topic_names}

    # --- offsets ----------------------------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, member_epoch: int, instance_id: str | None,
                               api_version: int | None = None, transactional: bool = False) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: a commit without a member epoch is accepted only while
        the group is empty; otherwise the member must exist, use OffsetCommit v9+ and name its epoch."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:  # a classic member commits with its generation, any version
            return ErrorCode.NONE if member_epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
        if not transactional and api_version is not None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE if member_epoch == member.member_epoch else ErrorCode.STALE_MEMBER_EPOCH

    def validate_delete(self) -> ErrorCode:
        return ErrorCode.NONE if not self.members else ErrorCode.NON_EMPTY_GROUP

    def epoch_records(self) -> list[CoordinatorRecord]:
        """The target assignment's epoch and the group epoch, as they stand (a converted group writes them)."""
        return [_record(cr.ConsumerGroupTargetAssignmentMetadataKey(self.group_id),
                        cr.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=self.assignment_epoch)),
                _record(cr.ConsumerGroupMetadataKey(self.group_id), cr.ConsumerGroupMetadataValue(epoch=self.group_epoch))]

    def deletion_records(self) -> list[CoordinatorRecord]:
        """Tombstones for an empty group (DeleteGroups, offset expiry): its target metadata, its partition
        metadata and its epoch."""
        return [_tombstone(cr.ConsumerGroupTargetAssignmentMetadataKey(self.group_id)),
                _tombstone(cr.ConsumerGroupPartitionMetadataKey(self.group_id)),
                _tombstone(cr.ConsumerGroupMetadataKey(self.group_id))]

    # --- the heartbeat ------------------------------------------------------------------------------------

    def heartbeat(self, request: Any, client_id: str, client_host: str, topics: Mapping[str, TopicInfo],
                  config: GroupConfig, new_member_id: Callable[[], str], now_ms: int) -> HeartbeatOutcome:
        """Answer one ConsumerGroupHeartbeat (validated by `validate_heartbeat`). Raises KafkaError."""
        epoch = request.member_epoch
        if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request)
        records: list[CoordinatorRecord] = []
        member_id = request.member_id or new_member_id()
        owned = request.topic_partitions
        member, is_new = self._member_for(request, member_id, owned, records)
        if is_new and len(self.members) >= config.group_max_size:
            raise KafkaError(f"the group has reached its maximum size ({config.group_max_size})",
                             ErrorCode.GROUP_MAX_SIZE_REACHED)
        updated = dataclasses.replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(sorted(set(request.subscribed_topic_names)))
                                    if request.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=_regex_update(request, member),
            client_id=client_id, client_host=client_host, classic=None)
        reconciled = self._advance(member, updated, is_new, owned, topics, records,
                                   takes_over=request.instance_id is not None and epoch == 0)
        response = messages.ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch, heartbeat_interval_ms=config.consumer_heartbeat_interval_ms)
        full = epoch == 0 or (request.rebalance_timeout_ms != -1 and request.subscribed_topic_names is not None
                              and owned is not None)
        if full or _frozen(reconciled.assigned) != _frozen(member.assigned) or reconciled.member_id != member.member_id:
            response.assignment = messages.ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=cr.topic_partitions(messages.ConsumerGroupHeartbeatResponse.TopicPartitions,
                                                     reconciled.assigned))
        return HeartbeatOutcome(records, response, reconciled)

    # --- classic members (KIP-848's online migration) ------------------------------------------------------

    def classic_join(self, request: Any, version: int, client_id: str, client_host: str,
                     topics: Mapping[str, TopicInfo], config: GroupConfig, new_member_id: Callable[[], str]
                     ) -> HeartbeatOutcome:
        """A JoinGroup from a consumer of the classic protocol (Kafka's classicGroupJoinToConsumerGroup): it
        becomes (or stays) a member of this group with the subscription its protocol metadata carries, and one
        step of reconciliation is taken with the partitions that metadata says it owns. The answer names it a
        follower at its member epoch (the generation of its SyncGroup, Heartbeat and OffsetCommit); the
        assignment comes with SyncGroup. Raises KafkaError."""
        if request.protocol_type != PROTOCOL_TYPE or not request.protocols:
            raise KafkaError("the group uses the consumer protocol", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        try:
            subscription = decode_subscription(bytes(request.protocols[0].metadata))
        except ValueError as error:
            raise KafkaError(str(error), ErrorCode.INCONSISTENT_GROUP_PROTOCOL) from None
        instance_id = request.group_instance_id
        member_id = request.member_id
        if not member_id:
            member_id = new_member_id()
            if version >= 4 and instance_id is None:  # a dynamic member is given its id first (KIP-394)
                response = join_response(ErrorCode.MEMBER_ID_REQUIRED, member_id)
                return HeartbeatOutcome([], response, None)
        records: list[CoordinatorRecord] = []
        member, is_new = self._classic_member_for(member_id, instance_id, bool(request.member_id), records)
        if is_new and len(self.members) >= config.group_max_size:
            raise KafkaError(f"the group has reached its maximum size ({config.group_max_size})",
                             ErrorCode.GROUP_MAX_SIZE_REACHED)
        updated = dataclasses.replace(
            member, instance_id=instance_id, rack_id=subscription.rack_id or member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms, server_assignor=None,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))), subscribed_topic_regex=None,
            client_id=client_id, client_host=client_host,
            classic=ClassicMeta(request.session_timeout_ms,
                                tuple((p.name, bytes(p.metadata)) for p in request.protocols)))
        owned = [_Owned(topics[name].topic_id, partitions) for name, partitions in subscription.owned
                 if name in topics]
        reconciled = self._advance(member, updated, is_new, owned, topics, records, takes_over=instance_id is not None)
        response = join_response(ErrorCode.NONE, reconciled.member_id, generation=reconciled.member_epoch,
                                 protocol_name=request.protocols[0].name)
        return HeartbeatOutcome(records, response, reconciled)

    def _classic_member_for(self, member_id: str, instance_id: str | None, known_id: bool,
                            records: list[CoordinatorRecord]) -> tuple[ConsumerMember, bool]:
        if instance_id is not None:
            existing = self.static_member(instance_id)
            if existing is None:
                return ConsumerMember(member_id), True
            if existing.member_id == member_id:
                return _checked_classic(existing), False
            if known_id:
                raise KafkaError(f"static member {instance_id} has been replaced", ErrorCode.FENCED_INSTANCE_ID)
            # The static member comes back under a new id: it takes its old place and assignment.
            replaced = dataclasses.replace(existing, member_id=member_id)
            records += self._replacement_records(existing, replaced)
            return replaced, False
        existing = self.members.get(member_id)
        if existing is None:  # new, or back with the id MEMBER_ID_REQUIRED gave it (as Kafka creates it then)
            return ConsumerMember(member_id), True
        return _checked_classic(existing), False

    def _replacement_records(self, existing: ConsumerMember, replaced: ConsumerMember) -> list[CoordinatorRecord]:
        """A static member back under a new id takes the old id's place: the old id's records go, and the new
        one gets its subscription, its target and its current assignment."""
        return [*_removal_records(self.group_id, existing.member_id), _member_metadata_record(self.group_id, replaced),
                _target_record(self.group_id, replaced.member_id, self.target.get(existing.member_id, {})),
                _current_assignment_record(self.group_id, replaced)]

    def classic_member(self, member_id: str, instance_id: str | None) -> ConsumerMember:
        """The classic member a SyncGroup, Heartbeat or LeaveGroup names (Kafka's validateConsumerGroupMember).
        Raises KafkaError: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID."""
        if instance_id is None:
            member = self.members.get(member_id)
        else:
            member = self.static_member(instance_id)
            if member is not None and member_id and member.member_id != member_id:
                raise KafkaError(f"static member {instance_id} has been replaced", ErrorCode.FENCED_INSTANCE_ID)
        if member is None:
            raise KafkaError(f"member {member_id} is not a member of group {self.group_id}",
                             ErrorCode.UNKNOWN_MEMBER_ID)
        return _checked_classic(member)

    def classic_sync(self, request: Any, topic_names: Mapping[uuid.UUID, str]) -> Any:
        """SyncGroup from a classic member: its current assignment as a ConsumerProtocolAssignment (Kafka's
        classicGroupSyncToConsumerGroup). Raises KafkaError."""
        member = self.classic_member(request.member_id, request.group_instance_id)
        if request.generation_id != member.member_epoch:
            raise KafkaError(f"generation {request.generation_id} is not the member's epoch {member.member_epoch}",
                             ErrorCode.ILLEGAL_GENERATION)
        first = member.classic.protocols[0]
        if (getattr(request, "protocol_type", None) not in (None, PROTOCOL_TYPE)
                or getattr(request, "protocol_name", None) not in (None, first[0])):
            raise KafkaError("the protocol differs from the member's", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if self.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            raise KafkaError("a new rebalance is triggered: rejoin", ErrorCode.REBALANCE_IN_PROGRESS)
        assigned = {topic_names[topic_id]: partitions for topic_id, partitions in member.assigned.items()
                    if topic_id in topic_names}
        try:
            version = decode_subscription(first[1]).version
        except ValueError:
            version = 0
        return messages.SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                          protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                                          assignment=encode_assignment(assigned, version))

    def classic_heartbeat(self, request: Any) -> ErrorCode:
        """Heartbeat from a classic member (Kafka's classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS
        while it must rejoin to move on (the group epoch passed its own, it has partitions to give up, or
        partitions it waits for have been released). Raises KafkaError."""
        member = self.classic_member(request.member_id, request.group_instance_id)
        if request.generation_id != member.member_epoch:
            raise KafkaError(f"generation {request.generation_id} is not the member's epoch {member.member_epoch}",
                             ErrorCode.ILLEGAL_GENERATION)
        if (member.member_epoch < self.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not self._waits_for_unreleased(member))):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _waits_for_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target that it does not have yet is still owned by another."""
        owners = self.partition_owners()
        for topic_id, partitions in self.target.get(member.member_id, {}).items():
            for partition in partitions - member.assigned.get(topic_id, frozenset()):
                if owners.get((topic_id, partition), member.member_id) != member.member_id:
                    return True
        return False

    def _advance(self, member: ConsumerMember, updated: ConsumerMember, is_new: bool, owned: list | None,
                 topics: Mapping[str, TopicInfo], records: list[CoordinatorRecord], takes_over: bool) -> ConsumerMember:
        """The member's new subscription written (the group epoch bumped when what the assignment depends on
        changed), the target recomputed when the group epoch moved past it, and one reconciliation step of the
        member given what it reports it owns (`owned`; None: unknown)."""
        bump = False
        if is_new or updated.subscription() != member.subscription():
            records.append(_member_metadata_record(self.group_id, updated))
            bump = is_new or (updated.subscribed_topic_names, updated.subscribed_topic_regex) != (
                member.subscribed_topic_names, member.subscribed_topic_regex)
        members = dict(self.members)
        members.pop(member.member_id, None)
        previous_target = dict(self.target)
        if takes_over:  # a static member's new id takes over the old one's
            replaced = self.static_member(updated.instance_id)
            if replaced is not None and replaced.member_id != updated.member_id:
                members.pop(replaced.member_id, None)
                previous_target[updated.member_id] = previous_target.pop(replaced.member_id, {})
        members[updated.member_id] = updated
        metadata = _subscription_metadata(members.values(), topics)
        if self._subscription_metadata_changed(metadata, records):
            bump = True
        group_epoch = self.group_epoch + 1 if bump else self.group_epoch
        if bump:
            records.append(_record(cr.ConsumerGroupMetadataKey(self.group_id),
                                   cr.ConsumerGroupMetadataValue(epoch=group_epoch)))
        if group_epoch > self.assignment_epoch:
            target = self._new_target(members, metadata, previous_target, records, group_epoch)
            target_epoch = group_epoch
        else:
            target = previous_target
            target_epoch = self.assignment_epoch
        member_target = target.get(updated.member_id, {})
        reconciled = self._reconcile(updated, target_epoch, member_target, owned)
        if reconciled.assignment_state() != updated.assignment_state() or is_new:
            records.append(_current_assignment_record(self.group_id, reconciled))
        return reconciled

    def _member_for(self, request: Any, member_id: str, owned: list | None,
                    records: list[CoordinatorRecord]) -> tuple[ConsumerMember, bool]:
        epoch, instance_id = request.member_epoch, request.instance_id
        if instance_id is not None:
            existing = self.static_member(instance_id)
            if epoch == 0:
                if existing is None:
                    return ConsumerMember(member_id), True
                if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and existing.member_id != member_id:
                    raise KafkaError(f"static member {instance_id} is still in use by {existing.member_id}",
                                     ErrorCode.UNRELEASED_INSTANCE_ID)
                # The static member comes back (under a new id): it takes its old place and assignment.
                replaced = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
                if existing.member_id != member_id:
                    records += self._replacement_records(existing, replaced)
                return replaced, False
            if existing is None:
                raise KafkaError(f"static member {instance_id} is unknown", ErrorCode.UNKNOWN_MEMBER_ID)
            if existing.member_id != member_id:
                raise KafkaError(f"static member {instance_id} has been replaced", ErrorCode.FENCED_INSTANCE_ID)
            _check_epoch(existing, epoch, owned)
            return existing, False
        existing = self.members.get(member_id)
        if epoch == 0:
            if existing is None:
                return ConsumerMember(member_id), True
            # A known member rejoins (after being fenced): it owns nothing now and starts again from epoch 0.
            return dataclasses.replace(existing, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                                       assigned={}, revoking={}), False
        if existing is None:
            raise KafkaError(f"member {member_id} is not a member of group {self.group_id}",
                             ErrorCode.UNKNOWN_MEMBER_ID)
        _check_epoch(existing, epoch, owned)
        return existing, False

    def _new_target(self, members: dict[str, ConsumerMember], metadata: dict[str, TopicInfo],
                    previous: dict[str, Assignment], records: list[CoordinatorRecord],
                    group_epoch: int) -> dict[str, Assignment]:
        subscriptions = {m.member_id: _effective_subscription(m, metadata) for m in members.values()}
        topics = {name: (info.topic_id, info.partitions) for name, info in metadata.items()}
        assignor = ASSIGNORS[_preferred_assignor(members.values())]
        target = assignor(subscriptions, topics, previous)
        for member_id in sorted(target):
            if _frozen(target[member_id]) != _frozen(self.target.get(member_id, {})) or member_id not in self.target:
                records.append(_target_record(self.group_id, member_id, target[member_id]))
        records.append(_record(cr.ConsumerGroupTargetAssignmentMetadataKey(self.group_id),
                               cr.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=group_epoch)))
        return target

    def _reconcile(self, member: ConsumerMember, target_epoch: int, target: Assignment,
                   owned: list | None) -> ConsumerMember:
        """Kafka's CurrentAssignmentBuilder: one step of `member` towards `target`."""
        if member.state is MemberState.STABLE and member.member_epoch == target_epoch:
            return member
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.revoking):
                return member
            return self._next_assignment(member, member.member_epoch + 1, target_epoch, target, owned)
        return self._next_assignment(member, member.member_epoch, target_epoch, target, owned)

    def _next_assignment(self, member: ConsumerMember, member_epoch: int, target_epoch: int, target: Assignment,
                         owned: list | None) -> ConsumerMember:
        owners = self.partition_owners()
        assigned: dict[uuid.UUID, frozenset[int]] = {}
        revoking: dict[uuid.UUID, frozenset[int]] = {}
        pending: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for topic_id in set(target) | set(member.assigned):
            wanted = target.get(topic_id, frozenset())
            current = member.assigned.get(topic_id, frozenset())
            kept = current & wanted
            to_assign = wanted - kept
            free = frozenset(p for p in to_assign
                             if owners.get((topic_id, p), member.member_id) == member.member_id
                             or self.bug_assign_unreleased_partitions)
            unreleased = unreleased or free != to_assign
            if kept:
                assigned[topic_id] = kept
            if current - kept:
                revoking[topic_id] = current - kept
            if free:
                pending[topic_id] = free
        if revoking and _owns_any(owned, revoking):
            return dataclasses.replace(member, state=MemberState.UNREVOKED_PARTITIONS,
                                       previous_member_epoch=_previous(member, member_epoch),
                                       member_epoch=member_epoch, assigned=assigned, revoking=revoking)
        for topic_id, partitions in pending.items():
            assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return dataclasses.replace(member, state=state, previous_member_epoch=_previous(member, target_epoch),
                                   member_epoch=target_epoch, assigned=assigned, revoking={})

    def _leave(self, request: Any) -> HeartbeatOutcome:
        member = (self.static_member(request.instance_id) if request.instance_id is not None
                  else self.members.get(request.member_id))
        if member is None:
            raise KafkaError(f"member {request.member_id} is not a member of group {self.group_id}",
                             ErrorCode.UNKNOWN_MEMBER_ID)
        if member.member_id != request.member_id:
            raise KafkaError(f"static member {request.instance_id} has been replaced", ErrorCode.FENCED_INSTANCE_ID)
        response = messages.ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, member_id=member.member_id,
            member_epoch=request.member_epoch, heartbeat_interval_ms=0)
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if member.instance_id is None:
                raise KafkaError("only a static member leaves with epoch -2", ErrorCode.INVALID_REQUEST)
            leaving = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, revoking={})
            return HeartbeatOutcome([_current_assignment_record(self.group_id, leaving)], response, leaving)
        return HeartbeatOutcome(self.fence(member.member_id), response, None)

    def fence(self, member_id: str) -> list[CoordinatorRecord]:
        """The records that remove a member (left, session expired, revocation timed out) and bump the epoch;
        as in Kafka, the subscribed topics' metadata without the member's own topics with them, so that the
        next heartbeat finds it unchanged rather than bumping the epoch a second time. It is narrowed from the
        metadata as it stands (a topic no other member subscribes to leaves it), so several members fenced in
        one poll narrow it in turn."""
        records = _removal_records(self.group_id, member_id)
        if self.subscription_metadata is not None and not self.bug_partition_metadata_volatile:
            remaining = [member for other, member in self.members.items() if other != member_id]
            self._subscription_metadata_changed(_subscription_metadata(remaining, self.subscription_metadata), records)
        records.append(_record(cr.ConsumerGroupMetadataKey(self.group_id),
                               cr.ConsumerGroupMetadataValue(epoch=self.group_epoch + 1)))
        return records

    def _subscription_metadata_changed(self, metadata: dict[str, TopicInfo], records: list[CoordinatorRecord]) -> bool:
        """Take `metadata` as the subscribed topics' metadata; if it differs from the group's, its record is
        written (but for the planted bug) and True returned."""
        if metadata == self.subscription_metadata:
            return False
        self.subscription_metadata = metadata
        if not self.bug_partition_metadata_volatile:
            records.append(_partition_metadata_record(self.group_id, metadata))
        return True

    # --- replay -------------------------------------------------------------------------------------------

    def replay(self, key: Any, value: Any) -> None:
        if isinstance(key, cr.ConsumerGroupMetadataKey):
            self.group_epoch = value.epoch if value is not None else 0
        elif isinstance(key, cr.ConsumerGroupPartitionMetadataKey):
            self.subscription_metadata = None if value is None else {
                topic.topic_name: TopicInfo(topic.topic_id, topic.num_partitions) for topic in value.topics}
        elif isinstance(key, cr.ConsumerGroupTargetAssignmentMetadataKey):
            self.assignment_epoch = value.assignment_epoch if value is not None else 0
        elif isinstance(key, cr.ConsumerGroupMemberMetadataKey):
            if value is None:
                self.members.pop(key.member_id, None)
                return
            member = self.members.get(key.member_id) or ConsumerMember(key.member_id)
            self.members[key.member_id] = dataclasses.replace(
                member, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                client_host=value.client_host, subscribed_topic_names=tuple(value.subscribed_topic_names),
                subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor, classic=None if value.classic_member_metadata is None else
                ClassicMeta(value.classic_member_metadata.session_timeout_ms,
                            tuple((p.name, bytes(p.metadata)) for p in value.classic_member_metadata.supported_protocols)))
        elif isinstance(key, cr.ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                self.target.pop(key.member_id, None)
            else:
                self.target[key.member_id] = cr.assignment_of(value.topic_partitions)
        elif isinstance(key, cr.ConsumerGroupCurrentMemberAssignmentKey):
            member = self.members.get(key.member_id)
            if value is None:
                if member is not None:
                    self.members[key.member_id] = dataclasses.replace(
                        member, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                        assigned={}, revoking={})
                return
            member = member or ConsumerMember(key.member_id)
            state = value.state if value.state in MemberState._value2member_map_ else MemberState.UNKNOWN
            self.members[key.member_id] = dataclasses.replace(
                member, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                state=MemberState(state), assigned=cr.assignment_of(value.assigned_partitions),
                revoking=cr.assignment_of(value.partitions_pending_revocation))

    # --- describe -----------------------------------------------------------------------------------------

    def describe(self, topic_names: Mapping[uuid.UUID, str]) -> Any:
        """This group as a ConsumerGroupDescribe item."""
        response_class = messages.ConsumerGroupDescribeResponse

        def assignment(parts: Mapping[uuid.UUID, frozenset[int]]) -> Any:
            return response_class.Assignment(topic_partitions=[
                response_class.TopicPartitions(topic_id=topic_id, topic_name=topic_names.get(topic_id, ""),
                                               partitions=sorted(partitions))
                for topic_id, partitions in sorted(parts.items()) if partitions])

        members = [response_class.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assigned),
            target_assignment=assignment(self.target.get(m.member_id, {})))
            for m in sorted(self.members.values(), key=lambda m: m.member_id)]
        return response_class.DescribedGroup(
            error_code=ErrorCode.NONE, group_id=self.group_id, group_state=self.state_name,
            group_epoch=self.group_epoch, assignment_epoch=self.assignment_epoch,
            assignor_name=_preferred_assignor(self.members.values()), members=members)


@dataclass(frozen=True)
class _Owned:
    """An owned partition list as a heartbeat's TopicPartitions carries it (topic id, partitions)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


def _checked_classic(member: ConsumerMember) -> ConsumerMember:
    if member.classic is None:  # Kafka's throwIfMemberDoesNotUseClassicProtocol
        raise KafkaError(f"member {member.member_id} uses the consumer protocol", ErrorCode.UNKNOWN_MEMBER_ID)
    return member


def join_response(code: ErrorCode, member_id: str, generation: int = -1, protocol_name: str = "") -> Any:
    """A JoinGroup answer to a classic member of a consumer group: the protocol type is "consumer" when it
    joined (read by v7+ clients, KIP-559), none on an error."""
    return messages.JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=generation,
                                      protocol_type=PROTOCOL_TYPE if code == ErrorCode.NONE else None,
                                      protocol_name=protocol_name, leader="", member_id=member_id, members=[])


def validate_heartbeat(request: Any) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid. Raises KafkaError (INVALID_REQUEST,
    UNSUPPORTED_ASSIGNOR, INVALID_GROUP_ID)."""

    def invalid(message: str) -> KafkaError:
        return KafkaError(message, ErrorCode.INVALID_REQUEST)

    if not request.group_id:
        raise KafkaError("GroupId can't be empty.", ErrorCode.INVALID_GROUP_ID)
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    epoch = request.member_epoch
    regex = getattr(request, "subscribed_topic_regex", None)
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not request.subscribed_topic_names and not regex:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
        raise KafkaError(f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                         f"{', '.join(sorted(ASSIGNORS))}.", ErrorCode.UNSUPPORTED_ASSIGNOR)
    if regex:
        if len(regex) > REGEX_LENGTH_MAX:
            raise invalid(f"SubscribedTopicRegex is longer than {REGEX_LENGTH_MAX} characters.")
        _compiled(regex)


_REGEXES: dict[str, re.Pattern] = {}


def _compiled(regex: str) -> re.Pattern:
    """A subscription regex (Kafka evaluates RE2/J; Python's `re` agrees on the patterns consumers use)."""
    pattern = _REGEXES.get(regex)
    if pattern is None:
        try:
            pattern = re.compile(regex)
        except re.error as error:
            raise KafkaError(f"SubscribedTopicRegex {regex!r} is invalid: {error}",
                             ErrorCode.INVALID_REGULAR_EXPRESSION) from None
        if len(_REGEXES) > 1_000:
            _REGEXES.clear()
        _REGEXES[regex] = pattern
    return pattern


def _regex_update(request: Any, member: ConsumerMember) -> str | None:
    regex = getattr(request, "subscribed_topic_regex", None)
    if regex is None:
        return member.subscribed_topic_regex
    return regex or None  # an empty regex clears it


def _effective_subscription(member: ConsumerMember, topics: Mapping[str, Any]) -> frozenset[str]:
    names = {name for name in member.subscribed_topic_names if name in topics}
    if member.subscribed_topic_regex:
        pattern = _compiled(member.subscribed_topic_regex)
        names.update(name for name in topics if not name.startswith("__") and pattern.fullmatch(name))
    return frozenset(names)


def _subscription_metadata(members, topics: Mapping[str, TopicInfo]) -> dict[str, TopicInfo]:
    names: set[str] = set()
    for member in members:
        names |= _effective_subscription(member, topics)
    return {name: topics[name] for name in sorted(names)}


def _preferred_assignor(members) -> str:
    """The assignor most members ask for (ties by name), else the default (Kafka's defaultAssignor logic)."""
    votes: dict[str, int] = {}
    for member in members:
        if member.server_assignor:
            votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
    if not votes:
        return DEFAULT_ASSIGNOR
    return min(votes, key=lambda name: (-votes[name], name))


def _check_epoch(member: ConsumerMember, epoch: int, owned: list | None) -> None:
    if epoch > member.member_epoch:
        raise KafkaError(f"member epoch {epoch} is greater than the coordinator's {member.member_epoch}",
                         ErrorCode.FENCED_MEMBER_EPOCH)
    if epoch < member.member_epoch and (epoch != member.previous_member_epoch
                                        or not _is_subset(owned, member.assigned)):
        raise KafkaError(f"member epoch {epoch} is older than the coordinator's {member.member_epoch}",
                         ErrorCode.FENCED_MEMBER_EPOCH)


def _is_subset(owned: list | None, assignment: Mapping[uuid.UUID, frozenset[int]]) -> bool:
    if owned is None:
        return False
    return all(set(item.partitions) <= assignment.get(item.topic_id, frozenset()) for item in owned)


def _owns_any(owned: list | None, assignment: Mapping[uuid.UUID, frozenset[int]]) -> bool:
    """Whether the member still reports owning any of `assignment` (unknown, when it reported nothing)."""
    if owned is None:
        return True
    return any(p in assignment.get(item.topic_id, ()) for item in owned for p in item.partitions)


def _previous(member: ConsumerMember, new_epoch: int) -> int:
    return member.member_epoch if new_epoch != member.member_epoch else member.previous_member_epoch


def _frozen(assignment: Mapping[uuid.UUID, frozenset[int]]) -> frozenset:
    return frozenset((topic_id, partitions) for topic_id, partitions in assignment.items() if partitions)


def _record(key: Any, value: Any) -> CoordinatorRecord:
    return CoordinatorRecord(cr.encode_consumer_key(key), cr.encode_consumer_value(value))


def _tombstone(key: Any) -> CoordinatorRecord:
    return CoordinatorRecord(cr.encode_consumer_key(key), None)


def _partition_metadata_record(group_id: str, metadata: Mapping[str, TopicInfo]) -> CoordinatorRecord:
    topic = cr.ConsumerGroupPartitionMetadataValue.TopicMetadata
    return _record(cr.ConsumerGroupPartitionMetadataKey(group_id), cr.ConsumerGroupPartitionMetadataValue(topics=[
        topic(topic_id=info.topic_id, topic_name=name, num_partitions=info.partitions, partition_metadata=[])
        for name, info in sorted(metadata.items())]))


def _member_metadata_record(group_id: str, member: ConsumerMember) -> CoordinatorRecord:
    return _record(cr.ConsumerGroupMemberMetadataKey(group_id, member.member_id), cr.ConsumerGroupMemberMetadataValue(
        instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex, rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor, classic_member_metadata=_classic_metadata(member.classic)))


def _classic_metadata(classic: ClassicMeta | None) -> Any:
    if classic is None:
        return None
    value_class = cr.ConsumerGroupMemberMetadataValue
    return value_class.ClassicMemberMetadata(session_timeout_ms=classic.session_timeout_ms, supported_protocols=[
        value_class.ClassicProtocol(name=name, metadata=metadata) for name, metadata in classic.protocols])


def _target_record(group_id: str, member_id: str, assignment: Assignment) -> CoordinatorRecord:
    value_class = cr.ConsumerGroupTargetAssignmentMemberValue
    return _record(cr.ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
                   value_class(topic_partitions=cr.topic_partitions(value_class.TopicPartitions, assignment)))


def _current_assignment_record(group_id: str, member: ConsumerMember) -> CoordinatorRecord:
    value_class = cr.ConsumerGroupCurrentMemberAssignmentValue
    return _record(cr.ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id), value_class(
        member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch, state=int(member.state),
        assigned_partitions=cr.topic_partitions(value_class.TopicPartitions, member.assigned),
        partitions_pending_revocation=cr.topic_partitions(value_class.TopicPartitions, member.revoking)))


def consumer_conversion_records(group_id: str, member: ConsumerMember) -> list[CoordinatorRecord]:
    """A member as a converted group writes it: its subscription, its target (its current assignment) and its
    current assignment."""
    return [_member_metadata_record(group_id, member), _target_record(group_id, member.member_id, member.assigned),
            _current_assignment_record(group_id, member)]


def _removal_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """Kafka's removeMember: the member's current assignment, target and subscription, in that order."""
    return [_tombstone(cr.ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id)),
            _tombstone(cr.ConsumerGroupTargetAssignmentMemberKey(group_id, member_id)),
            _tombstone(cr.ConsumerGroupMemberMetadataKey(group_id, member_id))]


removal_records = _removal_records

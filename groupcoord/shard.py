"""`GroupCoordinatorShard`: the groups and committed offsets of one `__consumer_offsets` partition, as a
coordinator shard (coordinator/shard.py: handle / replay / poll).

Theory of operation. The broker (broker/groups.py) hands each request to the shard of its group's partition as
a `GroupRequest` (api key, version, the decoded Kafka message, the client's id and host). Requests that name
several groups (DescribeGroups, DeleteGroups) are split by the broker into one request per group; the shard
answers those with one result item, which the broker assembles. The shard routes:

- JoinGroup, SyncGroup, Heartbeat, LeaveGroup to the group (groupcoord/classic.py);
- ConsumerGroupHeartbeat (KIP-848) to the consumer group (groupcoord/consumer.py), with the subscribed topics'
  ids and partition counts taken from the metadata image the broker attaches (`GroupRequest.topics`);
  ConsumerGroupDescribe is split per group like DescribeGroups. A group id names a classic group or a
  consumer group, never both. KIP-848's migration between them, as Kafka 4.0 does it: an empty group of either
  kind is replaced by the other; a consumer heartbeat joining a classic group of consumers converts it into a
  consumer group whose members keep their partitions (`_upgraded`); JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup for a consumer group go to its classic members (ConsumerGroup.classic_*); and when its last
  consumer-protocol member leaves or is fenced, a consumer group of classic members becomes a classic group
  again, which rebalances once its record is replayed (`_downgraded`). `group_consumer_migration_policy`
  switches each direction off (then a consumer heartbeat for a classic group is GROUP_ID_NOT_FOUND).
  Generations go on from epochs and back, so a number is not reused by one incarnation of a group;
- OffsetCommit, OffsetFetch, OffsetDelete to the offset store (groupcoord/offsets.py), after asking the group
  whether the commit is allowed;
- DescribeGroups, ListGroups, DeleteGroups read or delete groups.

`replay` decodes each record of the partition (groupcoord/records.py) and applies it: offsets to the store,
GroupMetadata to its group, transaction markers to pending transactional offsets. Records of key versions
this shard does not know are skipped, as Kafka's loader skips a newer writer's records.

Timers: member sessions, rebalance, initial-delay and pending-sync deadlines (per classic group), consumer
members' sessions and revocation deadlines and classic members' join and sync deadlines (here, per member),
and the offset-retention check.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from coordinator.shard import CoordinatorResult, LoadedRecord, TransactionalWrite
from groupcoord.classic import (
    SYNC_GROUP_VERSION_NAMES_PROTOCOL,
    ClassicGroup,
    GroupState,
    Outcome,
    join_error,
    merge,
    sync_error,
    vote_protocol,
)
from groupcoord import consumer_records
from groupcoord.config import GroupConfig
from groupcoord.consumer import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicInfo,
    consumer_conversion_records,
    removal_records,
    validate_heartbeat,
)
from groupcoord.consumer_protocol import decode_assignment, decode_subscription, encode_assignment
from groupcoord.offsets import OffsetStore, offset_commit_response, offset_fetch_response, txn_offset_commit_response
from groupcoord.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    decode_record,
    encode_group_metadata_value,
    encode_key,
)
from coordinator.shard import CoordinatorRecord
from net.protocol import messages
from net.protocol.codec import ApiKey
from partitions.errors import ErrorCode, KafkaError

CONTROL_TYPE_COMMIT = 1


@dataclass(frozen=True)
class GroupRequest:
    """One request for a group shard: the decoded Kafka message and who sent it."""

    api_key: int
    api_version: int
    message: Any
    client_id: str = ""
    client_host: str = ""
    topics: Mapping[str, TopicInfo] | None = None  # the metadata image's topics (consumer protocol requests)


@dataclass
class GroupOffsetFetch:
    """One group of an OffsetFetch: v0-7 name one group, v8+ several; the broker hands each to its shard in
    this shape (`topics` None: every committed partition; `member_id`/`member_epoch` from v9)."""

    group_id: str
    topics: list | None  # items with .name and .partition_indexes
    require_stable: bool = False
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


class GroupCoordinatorShard:
    """Groups and offsets of one __consumer_offsets partition (see the module docstring)."""

    def __init__(self, partition: int, config: GroupConfig | None = None,
                 topic_names: Callable[[], Mapping[uuid.UUID, str]] | None = None) -> None:
        self.partition = partition
        # The metadata image's topic ids -> names: a downgrade, which a timer may start, names its members'
        # partitions with them (without it, as in tests of other paths, it names none).
        self.topic_names = topic_names
        self.config = config or GroupConfig()
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore(self.config)
        self.next_retention_check_ms: int | None = None
        self.skipped_records = 0
        self.bug_accept_stale_generation = False  # test-only planted bugs, see ClassicGroup
        self.bug_expire_parked_members = False
        self.bug_no_pending_sync_expiry = False
        self.bug_assign_unreleased_partitions = False  # test-only planted bug, see ConsumerGroup
        self.bug_partition_metadata_volatile = False  # test-only planted bug, see ConsumerGroup
        # Test-only planted bugs for the simulator (simulations/group_migration_sim.py), never configured: an
        # upgraded group's classic members keep no current assignment; a group of classic members stays a
        # consumer group.
        self.bug_upgrade_forgets_assignments = False
        self.bug_no_downgrade = False
        # ... and a classic member that neither joins again when told to nor syncs within its rebalance timeout
        # is never fenced for it.
        self.bug_no_classic_rebalance_timeouts = False
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.consumer_sessions: dict[tuple[str, str], int] = {}  # (group, member) -> session deadline
        self.revocation_deadlines: dict[tuple[str, str], tuple[int, int]] = {}  # -> (deadline, member epoch)
        self._consumer_member_ids = 0
        # (group, member) -> deadline: a classic member told to rejoin must within its rebalance timeout (Kafka's
        # consumer group join timeout), else it is fenced: an eager one holds partitions others wait for.
        self.join_deadlines: dict[tuple[str, str], int] = {}
        # (group, member) -> deadline: a classic member answered a JoinGroup must send its SyncGroup within its
        # rebalance timeout (Kafka's consumer group sync timeout), else it is fenced.
        self.sync_deadlines: dict[tuple[str, str], int] = {}
        self.downgraded: set[str] = set()  # volatile: groups turned classic, to rebalance once replayed

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = self.groups[group_id] = ClassicGroup(group_id, self.config)
        group.bug_accept_stale_generation = self.bug_accept_stale_generation
        group.bug_expire_parked_members = self.bug_expire_parked_members
        group.bug_no_pending_sync_expiry = self.bug_no_pending_sync_expiry
        return group

    def _new_consumer_group(self, group_id: str) -> ConsumerGroup:
        """A consumer group with this shard's planted bugs (not added to `consumer_groups` here)."""
        group = ConsumerGroup(group_id)
        group.bug_assign_unreleased_partitions = self.bug_assign_unreleased_partitions
        group.bug_partition_metadata_volatile = self.bug_partition_metadata_volatile
        return group

    # --- requests -----------------------------------------------------------------------------------------

    def handle(self, request_id: int, request: GroupRequest, now_ms: int) -> CoordinatorResult:
        handler = {
            ApiKey.JOIN_GROUP: self._join,
            ApiKey.SYNC_GROUP: self._sync,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.DESCRIBE_GROUPS: self._describe,
            ApiKey.LIST_GROUPS: self._list,
            ApiKey.DELETE_GROUPS: self._delete,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._consumer_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._consumer_describe,
        }[request.api_key]
        outcome = handler(request_id, request, now_ms)
        if isinstance(outcome, CoordinatorResult):
            return outcome
        return CoordinatorResult(outcome.records, outcome.response, outcome.completions)

    def _group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def _join(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        if not message.group_id:
            return Outcome(response=join_error(ErrorCode.INVALID_GROUP_ID, message.member_id))
        consumer_group = self.consumer_groups.get(message.group_id)
        if consumer_group is not None and consumer_group.members:
            try:
                outcome = consumer_group.classic_join(message, request.api_version, request.client_id,
                                                      request.client_host, request.topics or {}, self.config,
                                                      lambda: self._new_consumer_member_id(message.group_id, now_ms))
            except KafkaError as error:
                return Outcome(response=join_error(error.code, message.member_id))
            if outcome.member is not None:
                self._track(message.group_id, outcome.member, now_ms)
                key = (message.group_id, outcome.member.member_id)
                self.join_deadlines.pop(key, None)
                self.sync_deadlines[key] = now_ms + max(outcome.member.rebalance_timeout_ms, 0)
            return Outcome(records=outcome.records, response=outcome.response)
        group = self.groups.get(message.group_id)
        if group is None:
            if len(self.groups) >= self.config.groups_per_shard_max:
                return Outcome(response=join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, message.member_id))
            group = self._new_group(message.group_id)
        if consumer_group is not None and group.generation < consumer_group.group_epoch:
            group.generation = consumer_group.group_epoch  # generations go on from the epochs (never reused)
        outcome = group.join(request_id, request.api_version, message, request.client_id, request.client_host, now_ms)
        if consumer_group is not None:
            # An empty consumer group becomes a classic group (the way back from group.protocol=consumer, as
            # Kafka's classicGroupJoinToClassicGroup deletes it): its tombstones go first, its committed offsets
            # stay. The consumer group leaves with their replay; a tombstone written twice is harmless.
            outcome = dataclasses.replace(outcome, records=consumer_group.deletion_records() + list(outcome.records))
        return outcome

    def _sync(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        if request.api_version >= SYNC_GROUP_VERSION_NAMES_PROTOCOL and (
                message.protocol_type is None or message.protocol_name is None):
            return Outcome(response=sync_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))  # as Kafka's KafkaApis
        consumer_group = self.consumer_groups.get(request.message.group_id)
        if consumer_group is not None:
            names = {info.topic_id: name for name, info in (request.topics or {}).items()}
            try:
                response = consumer_group.classic_sync(request.message, names)
            except KafkaError as error:
                if error.code == ErrorCode.REBALANCE_IN_PROGRESS:
                    self._must_rejoin(consumer_group, request.message, now_ms)
                return Outcome(response=sync_error(error.code))
            self._touch_classic(consumer_group, request.message.member_id, now_ms)
            self.sync_deadlines.pop((consumer_group.group_id, request.message.member_id), None)
            return Outcome(response=response)
        group = self._group(request.message.group_id)
        if group is None:
            code = ErrorCode.INVALID_GROUP_ID if not request.message.group_id else ErrorCode.UNKNOWN_MEMBER_ID
            return Outcome(response=sync_error(code))
        return group.sync(request_id, request.message, now_ms)

    def _heartbeat(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        consumer_group = self.consumer_groups.get(request.message.group_id)
        if consumer_group is not None:
            try:
                code = consumer_group.classic_heartbeat(request.message)
                self._touch_classic(consumer_group, request.message.member_id, now_ms)
                if code == ErrorCode.REBALANCE_IN_PROGRESS:
                    self._must_rejoin(consumer_group, request.message, now_ms)
            except KafkaError as error:
                code = error.code
            return Outcome(response=messages.HeartbeatResponse(throttle_time_ms=0, error_code=code))
        group = self._group(request.message.group_id)
        if group is None:
            code = ErrorCode.INVALID_GROUP_ID if not request.message.group_id else ErrorCode.UNKNOWN_MEMBER_ID
            return Outcome(response=messages.HeartbeatResponse(throttle_time_ms=0, error_code=code))
        return Outcome(response=group.heartbeat(request.message, now_ms))

    def _leave(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        consumer_group = self.consumer_groups.get(message.group_id)
        if consumer_group is not None:
            return self._classic_leave(consumer_group, request.api_version, message)
        group = self._group(message.group_id)
        if group is None:
            code = ErrorCode.INVALID_GROUP_ID if not message.group_id else ErrorCode.UNKNOWN_MEMBER_ID
            return Outcome(response=messages.LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[]))
        return group.leave(request.api_version, message, now_ms)

    # --- offsets ------------------------------------------------------------------------------------------

    def _offset_commit(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        code = self._commit_error(message, request.api_version)
        records, topics = self.offsets.commit(message, code, now_ms)
        group = self._group(message.group_id)
        if group is not None and code == ErrorCode.NONE:
            group.touch(message.member_id, now_ms)
        return Outcome(records=records, response=offset_commit_response(topics))

    def _txn_offset_commit(self, request_id: int, request: GroupRequest, now_ms: int) -> CoordinatorResult:
        """TxnOffsetCommit (KIP-98, KIP-447): the offsets are written as part of the producer's transaction and
        stay pending until its marker reaches this partition (OffsetStore.replay_marker). From v3 the group's
        generation and member are checked as for OffsetCommit; without them any group is accepted."""
        message = request.message
        code = ErrorCode.INVALID_GROUP_ID if not message.group_id else ErrorCode.NONE
        group = self._group(message.group_id)
        generation, member_id = getattr(message, "generation_id", -1), getattr(message, "member_id", "")
        consumer_group = self.consumer_groups.get(message.group_id)
        if code == ErrorCode.NONE and consumer_group is not None and (generation >= 0 or member_id):
            code = consumer_group.validate_offset_commit(member_id, generation, None, transactional=True)
        elif code == ErrorCode.NONE and group is not None and (generation >= 0 or member_id):
            code = group.validate_offset_commit(member_id, generation, getattr(message, "group_instance_id", None))
        elif code == ErrorCode.NONE and group is None and (generation >= 0 or member_id):
            code = ErrorCode.ILLEGAL_GENERATION
        records, topics = self.offsets.commit(message, code, now_ms)
        response = txn_offset_commit_response(topics)
        if not records:
            return CoordinatorResult.answer(response)
        return CoordinatorResult(records=records, response=response,
                                 transactional=TransactionalWrite(message.producer_id, message.producer_epoch))

    def _commit_error(self, message: Any, api_version: int) -> ErrorCode:
        if not message.group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._group(message.group_id)
        generation = message.generation_id_or_member_epoch
        instance = getattr(message, "group_instance_id", None)
        consumer_group = self.consumer_groups.get(message.group_id)
        if consumer_group is not None:
            return consumer_group.validate_offset_commit(message.member_id, generation, instance, api_version)
        if group is None:
            # A commit outside any group membership ("simple" consumers, admin tools) needs no group.
            if generation < 0 and not message.member_id:
                return ErrorCode.NONE
            return ErrorCode.UNKNOWN_MEMBER_ID if message.member_id else ErrorCode.ILLEGAL_GENERATION
        return group.validate_offset_commit(message.member_id, generation, instance)

    def _offset_fetch(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        consumer_group = self.consumer_groups.get(message.group_id)
        member_id, member_epoch = getattr(message, "member_id", None), getattr(message, "member_epoch", -1)
        if consumer_group is not None:
            code = consumer_group.validate_offset_fetch(member_id, member_epoch)
            if code != ErrorCode.NONE:
                return Outcome(response=code)
        topics = None if message.topics is None else [(t.name, list(t.partition_indexes)) for t in message.topics]
        answer = self.offsets.fetch(message.group_id, topics, bool(getattr(message, "require_stable", False)))
        return Outcome(response=offset_fetch_response(answer))

    def _offset_delete(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        response_class = messages.OffsetDeleteResponse
        group = self._group(message.group_id) or self.consumer_groups.get(message.group_id)
        if group is None and not self.offsets.has_group(message.group_id):
            return Outcome(response=response_class(throttle_time_ms=0, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                                   topics=[]))
        subscribed = group.subscribed_topics() if group is not None else set()
        records, topics = [], []
        for topic in message.topics:
            if subscribed is None or topic.name in subscribed:
                code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                code = ErrorCode.NONE
                records += self.offsets.tombstones(message.group_id, [(topic.name, p.partition_index)
                                                                      for p in topic.partitions])
            topics.append(response_class.OffsetDeleteResponseTopic(name=topic.name, partitions=[
                response_class.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=code)
                for p in topic.partitions]))
        return Outcome(records=records, response=response_class(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                                                topics=topics))

    # --- describe, list, delete ---------------------------------------------------------------------------

    def _describe(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        group_id = request.message
        if group_id in self.consumer_groups:  # as Kafka 4: not a classic group (ConsumerGroupDescribe it)
            return Outcome(response=messages.DescribeGroupsResponse.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id, group_state=GroupState.DEAD.value,
                protocol_type="", protocol_data="", members=[]))
        group = self._group(group_id)
        if group is None:
            response_class = messages.DescribeGroupsResponse
            state = GroupState.EMPTY.value if self.offsets.has_group(group_id) else GroupState.DEAD.value
            return Outcome(response=response_class.DescribedGroup(
                error_code=ErrorCode.NONE, group_id=group_id, group_state=state, protocol_type="", protocol_data="",
                members=[]))
        return Outcome(response=group.describe())

    def _list(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        return Outcome(response=self.list_groups())

    def list_groups(self) -> list[ListedGroup]:
        listed = {group_id: ListedGroup(group_id, group.protocol_type or "", group.state_name, group.group_type)
                  for group_id, group in self.groups.items()
                  if group.generation > 0 or group.members or self.offsets.has_group(group_id)}
        for group_id, group in self.consumer_groups.items():
            listed[group_id] = ListedGroup(group_id, group.protocol_type, group.state_name, group.group_type)
        for group_id in self.offsets.committed:
            listed.setdefault(group_id, ListedGroup(group_id, "", GroupState.EMPTY.value, "classic"))
        return [listed[g] for g in sorted(listed)]

    def _delete(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        group_id = request.message
        group = self._group(group_id) or self.consumer_groups.get(group_id)
        if group is None and not self.offsets.has_group(group_id):
            return Outcome(response=(group_id, ErrorCode.GROUP_ID_NOT_FOUND))
        code = group.validate_delete() if group is not None else ErrorCode.NONE
        if code != ErrorCode.NONE:
            return Outcome(response=(group_id, code))
        records = self.offsets.tombstones(group_id)
        if isinstance(group, ConsumerGroup):
            records += group.deletion_records()
        else:
            records.append(CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), None))
        return Outcome(records=records, response=(group_id, ErrorCode.NONE))

    # --- replay -------------------------------------------------------------------------------------------

    def replay(self, record: LoadedRecord) -> None:
        if record.is_control:
            self.offsets.replay_marker(record.producer_id, record.control_type == CONTROL_TYPE_COMMIT)
            return
        if record.key is None:
            self.skipped_records += 1
            return
        try:
            key, value = decode_record(record.key, record.value)
        except KafkaError:
            self.skipped_records += 1  # not ours to interpret; the log keeps it
            return
        if isinstance(key, OffsetCommitKey):
            self.offsets.replay(key, value, record.producer_id)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.groups.pop(key.group, None)
            else:
                group = self.groups.get(key.group) or self._new_group(key.group)
                group.replay_group_metadata(value)
        elif type(key) in CONSUMER_KEYS and not isinstance(value, consumer_records.SkippedValue):
            self._replay_consumer(key, value)
        else:
            self.skipped_records += 1

    def _replay_consumer(self, key: Any, value: Any) -> None:
        group = self.consumer_groups.get(key.group)
        if group is None:
            if value is None:
                return
            group = self.consumer_groups[key.group] = self._new_consumer_group(key.group)
        group.replay(key, value)
        if isinstance(key, consumer_records.ConsumerGroupMetadataKey) and value is None:
            del self.consumer_groups[key.group]  # the group is deleted
        elif isinstance(key, consumer_records.ConsumerGroupMemberMetadataKey) and value is None:
            self.consumer_sessions.pop((key.group, key.member_id), None)
            self.revocation_deadlines.pop((key.group, key.member_id), None)
            self.sync_deadlines.pop((key.group, key.member_id), None)

    # --- time ---------------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (g.next_deadline_ms() for g in self.groups.values()) if d is not None]
        if self.consumer_sessions:
            deadlines.append(min(self.consumer_sessions.values()))
        if self.revocation_deadlines:
            deadlines.append(min(d for d, _ in self.revocation_deadlines.values()))
        if not self.bug_no_classic_rebalance_timeouts:
            deadlines += [min(table.values()) for table in (self.join_deadlines, self.sync_deadlines) if table]
        if self.next_retention_check_ms is not None:
            deadlines.append(self.next_retention_check_ms)
        return min(deadlines) if deadlines else None

    def poll(self, now_ms: int) -> CoordinatorResult:
        outcome = self._rebalance_downgraded(now_ms) if self.downgraded else Outcome()
        for group in list(self.groups.values()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                outcome = merge(outcome, group.poll(now_ms))
        self._expire_consumer_members(now_ms, outcome)
        if self.next_retention_check_ms is not None and self.next_retention_check_ms <= now_ms:
            self.next_retention_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            outcome.records += self._expire_offsets(now_ms)
        self._forget_unrecorded_groups()
        return CoordinatorResult(outcome.records, None, outcome.completions, notices=outcome.notices)

    def _expire_offsets(self, now_ms: int) -> list[CoordinatorRecord]:
        """Tombstones for offsets past retention of groups without members (Kafka's cleanupGroupMetadata),
        and for the group itself once none of its offsets remain."""
        records = []
        for group_id in sorted(set(self.offsets.committed) | set(self.groups) | set(self.consumer_groups)):
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                if consumer_group.is_empty():
                    expired = self.offsets.expired(group_id, now_ms)
                    records += self.offsets.tombstones(group_id, expired)
                    if len(self.offsets.committed.get(group_id, {})) == len(expired):
                        records += consumer_group.deletion_records()
                continue
            group = self.groups.get(group_id)
            if group is not None and group.state is not GroupState.EMPTY:
                continue
            expired = self.offsets.expired(group_id, now_ms)
            records += self.offsets.tombstones(group_id, expired)
            remaining = len(self.offsets.committed.get(group_id, {})) - len(expired)
            if group is not None and remaining == 0 and group.state_timestamp_ms + self.config.offsets_retention_ms <= now_ms:
                records.append(CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), None))
        return records

    def _forget_unrecorded_groups(self) -> None:
        """A group that never completed a generation and has nobody waiting is volatile only: drop it."""
        for group_id in [g for g, group in self.groups.items()
                         if group.generation == 0 and not group.members and not group.pending_members]:
            del self.groups[group_id]

    def on_loaded(self, now_ms: int) -> None:
        for group in self.groups.values():
            group.on_loaded(now_ms)
        for group in self.consumer_groups.values():
            for member in group.members.values():
                self.consumer_sessions[(group.group_id, member.member_id)] = self._session_deadline(member, now_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self.revocation_deadlines[(group.group_id, member.member_id)] = (
                        now_ms + max(member.rebalance_timeout_ms, 0), member.member_epoch)
        self.next_retention_check_ms = now_ms + self.config.offsets_retention_check_interval_ms

    def parked_request_ids(self) -> list[int]:
        return [request_id for group in self.groups.values() for request_id in group.parked_request_ids()]

    # --- the consumer protocol (KIP-848) ---------------------------------------------------------------------

    def _consumer_heartbeat(self, request_id: int, request: GroupRequest, now_ms: int) -> CoordinatorResult:
        message = request.message
        try:
            validate_heartbeat(message)
            group = self.consumer_groups.get(message.group_id)
            records = []
            completions: list = []
            if group is None:
                classic = self.groups.get(message.group_id)
                if message.member_epoch != 0 and classic is not None and not classic.is_empty():
                    # A consumer-protocol member the group lost when it turned classic (its session expired
                    # meanwhile): not a member any more, so it joins again (with epoch 0, which upgrades it).
                    raise KafkaError(f"member {message.member_id} is not a member of group {message.group_id}",
                                     ErrorCode.UNKNOWN_MEMBER_ID)
                if message.member_epoch != 0:
                    raise KafkaError(f"group {message.group_id} not found", ErrorCode.GROUP_ID_NOT_FOUND)
                if classic is not None and not classic.is_empty():
                    # KIP-848's online upgrade: the classic group becomes a consumer group of classic members
                    group, records, completions = self._upgraded(classic, request.topics or {}, now_ms)
                else:
                    group = self._new_consumer_group(message.group_id)  # created by the replay of its records
                    if classic is not None:  # an empty classic group becomes a consumer group
                        records.append(CoordinatorRecord(encode_key(GroupMetadataKey(message.group_id)), None))
                        # its epochs go on from the generations (a generation number is never reused)
                        group.group_epoch = group.assignment_epoch = classic.generation
            outcome = group.heartbeat(message, request.client_id, request.client_host, request.topics or {},
                                      self.config, lambda: self._new_consumer_member_id(message.group_id, now_ms), now_ms)
        except KafkaError as error:
            return CoordinatorResult.answer(messages.ConsumerGroupHeartbeatResponse(
                throttle_time_ms=0, error_code=error.code, error_message=error.message, member_epoch=-1))
        records += outcome.records
        if outcome.member is None:  # it left
            self._untrack(message.group_id, outcome.response.member_id)
            records += self._downgraded(group, {outcome.response.member_id}, now_ms)
        else:
            self._track(message.group_id, outcome.member, now_ms)
        return CoordinatorResult(records, outcome.response, completions)

    # --- KIP-848's online migration: classic members in consumer groups, and the conversions ------------------

    def _track(self, group_id: str, member: ConsumerMember, now_ms: int) -> None:
        """A member's session (its own timeout for a classic member) and revocation deadline."""
        key = (group_id, member.member_id)
        self.consumer_sessions[key] = self._session_deadline(member, now_ms)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            deadline = self.revocation_deadlines.get(key)
            if deadline is None or deadline[1] != member.member_epoch:
                self.revocation_deadlines[key] = (now_ms + max(member.rebalance_timeout_ms, 0), member.member_epoch)
        else:
            self.revocation_deadlines.pop(key, None)

    def _session_deadline(self, member: ConsumerMember, now_ms: int) -> int:
        """When the member's session ends: its own timeout for a classic member, the group's for the others."""
        return now_ms + (member.session_timeout_ms or self.config.consumer_session_timeout_ms)

    def _must_rejoin(self, group: ConsumerGroup, message: Any, now_ms: int) -> None:
        """A classic member told REBALANCE_IN_PROGRESS: it must join again within its rebalance timeout."""
        member = group.classic_member(message.member_id, message.group_instance_id)
        self.join_deadlines.setdefault((group.group_id, member.member_id), now_ms + max(member.rebalance_timeout_ms, 0))

    def _untrack(self, group_id: str, member_id: str) -> None:
        self.consumer_sessions.pop((group_id, member_id), None)
        self.revocation_deadlines.pop((group_id, member_id), None)
        self.join_deadlines.pop((group_id, member_id), None)
        self.sync_deadlines.pop((group_id, member_id), None)

    def _touch_classic(self, group: ConsumerGroup, member_id: str, now_ms: int) -> None:
        member = group.members.get(member_id)
        if member is not None and member.classic is not None:
            self.consumer_sessions[(group.group_id, member_id)] = self._session_deadline(member, now_ms)

    def _classic_leave(self, group: ConsumerGroup, version: int, message: Any) -> Outcome:
        """LeaveGroup from classic members of a consumer group (Kafka's classicGroupLeaveToConsumerGroup)."""
        response_class = messages.LeaveGroupResponse
        identities = [(message.member_id, None)] if version < 3 else \
            [(m.member_id, m.group_instance_id) for m in message.members]
        records, results = [], []
        for member_id, instance_id in identities:
            try:
                member = group.classic_member(member_id, instance_id)
            except KafkaError as error:
                results.append(response_class.MemberResponse(member_id=member_id, group_instance_id=instance_id,
                                                             error_code=error.code))
                continue
            records += group.fence(member.member_id)
            self._untrack(group.group_id, member.member_id)
            results.append(response_class.MemberResponse(member_id=member.member_id, group_instance_id=instance_id,
                                                         error_code=ErrorCode.NONE))
        if version < 3:
            return Outcome(records=records, response=response_class(throttle_time_ms=0,
                                                                    error_code=results[0].error_code, members=[]))
        return Outcome(records=records, response=response_class(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                                                members=results))

    def _upgraded(self, classic: ClassicGroup, topics: Mapping[str, TopicInfo],
                  now_ms: int) -> tuple[ConsumerGroup, list[CoordinatorRecord], list]:
        """A non-empty classic group as a consumer group of classic members (Kafka's convertToConsumerGroup):
        each member at the group's generation with the assignment of its last SyncGroup as both its current and
        its target assignment; the records that delete the classic group and write the consumer group, and the
        answers to the joins and syncs the classic group held (REBALANCE_IN_PROGRESS: they join again).
        Raises KafkaError (GROUP_ID_NOT_FOUND) when the upgrade is off, or the group is not one of consumers."""
        group_id = classic.group_id
        if not self.config.upgrade_enabled or classic.protocol_type != ConsumerGroup.protocol_type \
                or classic.generation <= 0 or len(classic.members) >= self.config.group_max_size:
            raise KafkaError(f"group {group_id} is a classic group that cannot be upgraded",
                             ErrorCode.GROUP_ID_NOT_FOUND)
        group = self._new_consumer_group(group_id)
        generation = classic.generation
        records = [CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), None)]
        completions: list = []
        for member in classic.members.values():
            if member.join_request is not None:
                completions.append((member.join_request, join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id)))
            if member.sync_request is not None:
                completions.append((member.sync_request, sync_error(ErrorCode.REBALANCE_IN_PROGRESS)))
            protocols = tuple((name, bytes(metadata)) for name, metadata in member.protocols)
            try:
                subscription = decode_subscription(member.metadata_for(classic.protocol_name) or protocols[0][1])
                assigned_by_name = decode_assignment(member.assignment)
            except (ValueError, IndexError):
                raise KafkaError(f"group {group_id}: a member's embedded consumer protocol is malformed",
                                 ErrorCode.GROUP_ID_NOT_FOUND) from None
            unknown = sorted(name for name in assigned_by_name if name not in topics)
            if unknown:
                # This broker's metadata is behind the members' (or the topic was deleted and their next rebalance
                # drops it): converting now would free partitions they still read. The member tries again.
                raise KafkaError(f"group {group_id}: the coordinator's metadata does not know topic {unknown[0]} "
                                 "yet", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            assigned = {topics[name].topic_id: frozenset(partitions) for name, partitions in assigned_by_name.items()
                        if partitions and not self.bug_upgrade_forgets_assignments}
            converted = ConsumerMember(
                member.member_id, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
                client_id=member.client_id, client_host=member.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=member.rebalance_timeout_ms, member_epoch=generation,
                previous_member_epoch=generation, assigned=assigned,
                classic=ClassicMeta(member.session_timeout_ms, protocols))
            group.members[member.member_id] = converted
            group.target[member.member_id] = assigned
            records += consumer_conversion_records(group_id, converted)
            self.consumer_sessions[(group_id, member.member_id)] = self._session_deadline(converted, now_ms)
        group.group_epoch = group.assignment_epoch = generation
        records += group.epoch_records()
        return group, records, completions

    def _downgraded(self, group: ConsumerGroup, leaving: set[str], now_ms: int) -> list[CoordinatorRecord]:
        """When the last consumer-protocol member left and classic members remain, the records that turn the
        group back into a classic group of them (Kafka's convertToClassicGroup), at the group epoch, each with
        its current assignment; the classic group starts a rebalance once they are replayed (poll). Nothing
        when the group keeps a consumer-protocol member, would be empty, or the downgrade is off."""
        remaining = [m for m in group.members.values() if m.member_id not in leaving]
        if (not remaining or any(m.classic is None for m in remaining) or not self.config.downgrade_enabled
                or len(remaining) > self.config.group_max_size or self.bug_no_downgrade):
            return []
        names = self.topic_names() if self.topic_names is not None else {}
        protocol = vote_protocol([m.classic.protocols for m in remaining])
        if protocol is None:
            return []
        records: list[CoordinatorRecord] = []
        for member in group.members.values():
            records += removal_records(group.group_id, member.member_id)
            self._untrack(group.group_id, member.member_id)
        records += group.deletion_records()
        members = []
        for member in remaining:
            metadata = next(data for name, data in member.classic.protocols if name == protocol)
            try:
                version = decode_subscription(metadata).version
            except ValueError:
                version = 0
            assigned = {names[t]: sorted(ps) for t, ps in member.assigned.items() if t in names}
            members.append(MemberMetadata(member.member_id, member.instance_id, member.client_id, member.client_host,
                                          member.rebalance_timeout_ms, member.classic.session_timeout_ms, metadata,
                                          encode_assignment(assigned, version)))
        value = GroupMetadataValue(ConsumerGroup.protocol_type, group.group_epoch, protocol, remaining[0].member_id,
                                   now_ms, tuple(members))
        records.append(CoordinatorRecord(encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value)))
        self.downgraded.add(group.group_id)
        return records

    def _rebalance_downgraded(self, now_ms: int) -> Outcome:
        """A group just turned back into a classic group rebalances (its members rejoin as classic ones)."""
        outcome = Outcome()
        for group_id in sorted(self.downgraded):
            group = self.groups.get(group_id)
            if group is not None and group.state is GroupState.STABLE and group_id not in self.consumer_groups:
                for member_id in group.members:
                    group.touch(member_id, now_ms)
                outcome = merge(outcome, group.prepare_rebalance(now_ms))
                self.downgraded.discard(group_id)
            elif group_id not in self.consumer_groups:
                self.downgraded.discard(group_id)
        return outcome

    def _new_consumer_member_id(self, group_id: str, now_ms: int) -> str:
        """A member id for a v0 client or a classic member that asks the coordinator for one (v1 clients bring
        their own): unique in the group, and across the shard's incarnations (its counter starts again after a
        failover, the clock does not), yet the same in every replay of a simulation."""
        group = self.consumer_groups.get(group_id)
        while True:
            self._consumer_member_ids += 1
            candidate = str(uuid.uuid5(uuid.NAMESPACE_OID,
                                       f"{group_id}/{self.partition}/{now_ms}/{self._consumer_member_ids}"))
            if group is None or candidate not in group.members:
                return candidate

    def _consumer_describe(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        group_id = request.message
        group = self.consumer_groups.get(group_id)
        response_class = messages.ConsumerGroupDescribeResponse
        if group is None:
            message = (f"group {group_id} is not a consumer group" if group_id in self.groups
                       else f"group {group_id} not found")
            return Outcome(response=response_class.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                                                  error_message=message, group_id=group_id))
        names = {info.topic_id: name for name, info in (request.topics or {}).items()}
        return Outcome(response=group.describe(names))

    def _expire_consumer_members(self, now_ms: int, outcome: Outcome) -> None:
        """Fence consumer members whose session expired, who did not revoke within their rebalance timeout, or
        (classic members) who did not join again within it when told to or sent no SyncGroup within it after a
        JoinGroup: their records and a notice each go into `outcome`."""
        reasons = {key: "session expired" for key, deadline in self.consumer_sessions.items() if deadline <= now_ms}
        for key, deadline in self.join_deadlines.items():
            if deadline <= now_ms and not self.bug_no_classic_rebalance_timeouts:
                reasons.setdefault(key, "did not join again within the rebalance timeout")
        for key, deadline in self.sync_deadlines.items():
            if deadline <= now_ms and not self.bug_no_classic_rebalance_timeouts:
                reasons.setdefault(key, "no SyncGroup within the rebalance timeout")
        for key, (deadline, epoch) in self.revocation_deadlines.items():
            member = self._consumer_member(key)
            if deadline <= now_ms and member is not None and member.state is MemberState.UNREVOKED_PARTITIONS \
                    and member.member_epoch == epoch:
                reasons.setdefault(key, "did not revoke its partitions within the rebalance timeout")
        records = outcome.records
        fenced: dict[str, set[str]] = {}  # group -> members fenced by this poll (their records not replayed yet)
        for key in sorted(reasons):
            self._untrack(*key)
            group = self.consumer_groups.get(key[0])
            if group is None or key[1] not in group.members or key[1] in fenced.get(key[0], ()) \
                    or key[0] in self.downgraded:  # (a group turned classic by this poll: its members are classic)
                continue
            member = group.members[key[1]]
            outcome.notices.append(("group_member_expired", dict(
                group_id=key[0], member_id=key[1], group_instance_id=member.instance_id, client_id=member.client_id,
                client_host=member.client_host, protocol="consumer" if member.classic is None else "classic",
                reason=reasons[key])))
            records += group.fence(key[1])
            fenced.setdefault(key[0], set()).add(key[1])
            if member.classic is None:
                records += self._downgraded(group, fenced[key[0]], now_ms)

    def _consumer_member(self, key: tuple[str, str]):
        group = self.consumer_groups.get(key[0])
        return None if group is None else group.members.get(key[1])


CONSUMER_KEYS = frozenset({
    consumer_records.ConsumerGroupMetadataKey,
    consumer_records.ConsumerGroupPartitionMetadataKey,
    consumer_records.ConsumerGroupMemberMetadataKey,
    consumer_records.ConsumerGroupTargetAssignmentMetadataKey,
    consumer_records.ConsumerGroupTargetAssignmentMemberKey,
    consumer_records.ConsumerGroupCurrentMemberAssignmentKey,
})


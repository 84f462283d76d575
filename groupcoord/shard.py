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
  consumer group, never both: a consumer heartbeat for a classic group with members is GROUP_ID_NOT_FOUND, a
  JoinGroup for a consumer group with members INCONSISTENT_GROUP_PROTOCOL; an empty group of either kind is
  replaced by the other (the offline upgrade to group.protocol=consumer and the way back, as Kafka does);
- OffsetCommit, OffsetFetch, OffsetDelete to the offset store (groupcoord/offsets.py), after asking the group
  whether the commit is allowed;
- DescribeGroups, ListGroups, DeleteGroups read or delete groups.

`replay` decodes each record of the partition (groupcoord/records.py) and applies it: offsets to the store,
GroupMetadata to its group, transaction markers to pending transactional offsets. Records of key versions
this shard does not know are skipped, as Kafka's loader skips a newer writer's records.

Timers: member sessions, rebalance and initial-delay deadlines (per classic group), consumer members'
sessions and revocation deadlines (here, per member), and the offset-retention check.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from coordinator.shard import CoordinatorResult, LoadedRecord, TransactionalWrite
from groupcoord.classic import ClassicGroup, GroupState, Outcome, join_error, merge, sync_error
from groupcoord import consumer_records
from groupcoord.config import GroupConfig
from groupcoord.consumer import ConsumerGroup, MemberState, TopicInfo, validate_heartbeat
from groupcoord.offsets import OffsetStore, offset_commit_response, offset_fetch_response, txn_offset_commit_response
from groupcoord.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_record,
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

    def __init__(self, partition: int, config: GroupConfig | None = None) -> None:
        self.partition = partition
        self.config = config or GroupConfig()
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore(self.config)
        self.next_retention_check_ms: int | None = None
        self.skipped_records = 0
        self.bug_accept_stale_generation = False  # test-only planted bug, see ClassicGroup
        self.bug_assign_unreleased_partitions = False  # test-only planted bug, see ConsumerGroup
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.consumer_sessions: dict[tuple[str, str], int] = {}  # (group, member) -> session deadline
        self.revocation_deadlines: dict[tuple[str, str], tuple[int, int]] = {}  # -> (deadline, member epoch)
        self._consumer_member_ids = 0

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = self.groups[group_id] = ClassicGroup(group_id, self.config)
        group.bug_accept_stale_generation = self.bug_accept_stale_generation
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
            return Outcome(response=join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, message.member_id))
        group = self.groups.get(message.group_id)
        if group is None:
            if len(self.groups) >= self.config.groups_per_shard_max:
                return Outcome(response=join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, message.member_id))
            group = self._new_group(message.group_id)
        outcome = group.join(request_id, request.api_version, message, request.client_id, request.client_host, now_ms)
        if consumer_group is not None:
            # An empty consumer group becomes a classic group (the way back from group.protocol=consumer, as
            # Kafka's classicGroupJoinToClassicGroup deletes it): its tombstones go first, its committed offsets
            # stay. The consumer group leaves with their replay; a tombstone written twice is harmless.
            outcome = dataclasses.replace(outcome, records=consumer_group.deletion_records() + list(outcome.records))
        return outcome

    def _sync(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        group = self._group(request.message.group_id)
        if group is None:
            code = ErrorCode.INVALID_GROUP_ID if not request.message.group_id else ErrorCode.UNKNOWN_MEMBER_ID
            return Outcome(response=sync_error(code))
        return group.sync(request_id, request.message, now_ms)

    def _heartbeat(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        group = self._group(request.message.group_id)
        if group is None:
            code = ErrorCode.INVALID_GROUP_ID if not request.message.group_id else ErrorCode.UNKNOWN_MEMBER_ID
            return Outcome(response=messages.HeartbeatResponse(throttle_time_ms=0, error_code=code))
        return Outcome(response=group.heartbeat(request.message, now_ms))

    def _leave(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
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
            group = self.consumer_groups[key.group] = ConsumerGroup(key.group)
            group.bug_assign_unreleased_partitions = self.bug_assign_unreleased_partitions
        group.replay(key, value)
        if isinstance(key, consumer_records.ConsumerGroupMetadataKey) and value is None:
            del self.consumer_groups[key.group]  # the group is deleted
        elif isinstance(key, consumer_records.ConsumerGroupMemberMetadataKey) and value is None:
            self.consumer_sessions.pop((key.group, key.member_id), None)
            self.revocation_deadlines.pop((key.group, key.member_id), None)

    # --- time ---------------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (g.next_deadline_ms() for g in self.groups.values()) if d is not None]
        if self.consumer_sessions:
            deadlines.append(min(self.consumer_sessions.values()))
        if self.revocation_deadlines:
            deadlines.append(min(d for d, _ in self.revocation_deadlines.values()))
        if self.next_retention_check_ms is not None:
            deadlines.append(self.next_retention_check_ms)
        return min(deadlines) if deadlines else None

    def poll(self, now_ms: int) -> CoordinatorResult:
        outcome = Outcome()
        for group in list(self.groups.values()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                outcome = merge(outcome, group.poll(now_ms))
        outcome.records += self._expire_consumer_members(now_ms)
        if self.next_retention_check_ms is not None and self.next_retention_check_ms <= now_ms:
            self.next_retention_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            outcome.records += self._expire_offsets(now_ms)
        self._forget_unrecorded_groups()
        return CoordinatorResult(outcome.records, None, outcome.completions)

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
                self.consumer_sessions[(group.group_id, member.member_id)] = now_ms + self.config.consumer_session_timeout_ms
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
            if group is None:
                classic = self.groups.get(message.group_id)
                if classic is not None and not classic.is_empty():
                    raise KafkaError(f"group {message.group_id} is a classic group", ErrorCode.GROUP_ID_NOT_FOUND)
                if message.member_epoch != 0:
                    raise KafkaError(f"group {message.group_id} not found", ErrorCode.GROUP_ID_NOT_FOUND)
                if classic is not None:  # an empty classic group becomes a consumer group
                    records.append(CoordinatorRecord(encode_key(GroupMetadataKey(message.group_id)), None))
                group = ConsumerGroup(message.group_id)  # created by the replay of its records
                group.bug_assign_unreleased_partitions = self.bug_assign_unreleased_partitions
            outcome = group.heartbeat(message, request.client_id, request.client_host, request.topics or {},
                                      self.config, lambda: self._new_consumer_member_id(message.group_id), now_ms)
        except KafkaError as error:
            return CoordinatorResult.answer(messages.ConsumerGroupHeartbeatResponse(
                throttle_time_ms=0, error_code=error.code, error_message=error.message, member_epoch=-1))
        key = (message.group_id, outcome.response.member_id)
        member = outcome.member
        if member is None:  # it left
            self.consumer_sessions.pop(key, None)
            self.revocation_deadlines.pop(key, None)
        else:
            self.consumer_sessions[key] = now_ms + self.config.consumer_session_timeout_ms
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                deadline = self.revocation_deadlines.get(key)
                if deadline is None or deadline[1] != member.member_epoch:
                    self.revocation_deadlines[key] = (now_ms + max(member.rebalance_timeout_ms, 0),
                                                      member.member_epoch)
            else:
                self.revocation_deadlines.pop(key, None)
        return CoordinatorResult.answer(outcome.response, records + outcome.records)

    def _new_consumer_member_id(self, group_id: str) -> str:
        """A member id for a v0 client that asks the coordinator for one (v1 clients bring their own)."""
        self._consumer_member_ids += 1
        return str(uuid.uuid5(uuid.NAMESPACE_OID, f"{group_id}/{self.partition}/{self._consumer_member_ids}"))

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

    def _expire_consumer_members(self, now_ms: int) -> list[CoordinatorRecord]:
        """Fence consumer members whose session expired or who did not revoke within their rebalance timeout."""
        expired = {key for key, deadline in self.consumer_sessions.items() if deadline <= now_ms}
        for key, (deadline, epoch) in self.revocation_deadlines.items():
            member = self._consumer_member(key)
            if deadline <= now_ms and member is not None and member.state is MemberState.UNREVOKED_PARTITIONS \
                    and member.member_epoch == epoch:
                expired.add(key)
        records = []
        for key in sorted(expired):
            self.consumer_sessions.pop(key, None)
            self.revocation_deadlines.pop(key, None)
            group = self.consumer_groups.get(key[0])
            if group is not None and key[1] in group.members:
                records += group.fence(key[1])
        return records

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

"""`GroupCoordinatorShard`: the groups and committed offsets of one `__consumer_offsets` partition, as a
coordinator shard (coordinator/shard.py: handle / replay / poll).

Theory of operation. The broker (broker/groups.py) hands each request to the shard of its group's partition as
a `GroupRequest` (api key, version, the decoded Kafka message, the client's id and host). Requests that name
several groups (DescribeGroups, DeleteGroups) are split by the broker into one request per group; the shard
answers those with one result item, which the broker assembles. The shard routes:

- JoinGroup, SyncGroup, Heartbeat, LeaveGroup to the group (groupcoord/classic.py);
- OffsetCommit, OffsetFetch, OffsetDelete to the offset store (groupcoord/offsets.py), after asking the group
  whether the commit is allowed;
- DescribeGroups, ListGroups, DeleteGroups read or delete groups.

`replay` decodes each record of the partition (groupcoord/records.py) and applies it: offsets to the store,
GroupMetadata to its group, transaction markers to pending transactional offsets. Records of key versions
this shard does not know are skipped, as Kafka's loader skips a newer writer's records.

Timers: member sessions, rebalance and initial-delay deadlines (per group), and the offset-retention check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.shard import CoordinatorResult, LoadedRecord, TransactionalWrite
from groupcoord.classic import ClassicGroup, GroupState, Outcome, join_error, merge, sync_error
from groupcoord.config import GroupConfig
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
        group = self.groups.get(message.group_id)
        if group is None:
            if len(self.groups) >= self.config.groups_per_shard_max:
                return Outcome(response=join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, message.member_id))
            group = self._new_group(message.group_id)
        return group.join(request_id, request.api_version, message, request.client_id, request.client_host, now_ms)

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
        code = self._commit_error(message)
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
        if code == ErrorCode.NONE and group is not None and (generation >= 0 or member_id):
            code = group.validate_offset_commit(member_id, generation, getattr(message, "group_instance_id", None))
        elif code == ErrorCode.NONE and group is None and (generation >= 0 or member_id):
            code = ErrorCode.ILLEGAL_GENERATION
        records, topics = self.offsets.commit(message, code, now_ms)
        response = txn_offset_commit_response(topics)
        if not records:
            return CoordinatorResult.answer(response)
        return CoordinatorResult(records=records, response=response,
                                 transactional=TransactionalWrite(message.producer_id, message.producer_epoch))

    def _commit_error(self, message: Any) -> ErrorCode:
        if not message.group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._group(message.group_id)
        generation = message.generation_id_or_member_epoch
        instance = getattr(message, "group_instance_id", None)
        if group is None:
            # A commit outside any group membership ("simple" consumers, admin tools) needs no group.
            if generation < 0 and not message.member_id:
                return ErrorCode.NONE
            return ErrorCode.UNKNOWN_MEMBER_ID if message.member_id else ErrorCode.ILLEGAL_GENERATION
        return group.validate_offset_commit(message.member_id, generation, instance)

    def _offset_fetch(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        topics = None if message.topics is None else [(t.name, list(t.partition_indexes)) for t in message.topics]
        answer = self.offsets.fetch(message.group_id, topics, bool(getattr(message, "require_stable", False)))
        return Outcome(response=offset_fetch_response(answer))

    def _offset_delete(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        message = request.message
        response_class = messages.OffsetDeleteResponse
        group = self._group(message.group_id)
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
        for group_id in self.offsets.committed:
            listed.setdefault(group_id, ListedGroup(group_id, "", GroupState.EMPTY.value, "classic"))
        return [listed[g] for g in sorted(listed)]

    def _delete(self, request_id: int, request: GroupRequest, now_ms: int) -> Outcome:
        group_id = request.message
        group = self._group(group_id)
        if group is None and not self.offsets.has_group(group_id):
            return Outcome(response=(group_id, ErrorCode.GROUP_ID_NOT_FOUND))
        code = group.validate_delete() if group is not None else ErrorCode.NONE
        if code != ErrorCode.NONE:
            return Outcome(response=(group_id, code))
        records = self.offsets.tombstones(group_id)
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
        else:
            self.skipped_records += 1

    # --- time ---------------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (g.next_deadline_ms() for g in self.groups.values()) if d is not None]
        if self.next_retention_check_ms is not None:
            deadlines.append(self.next_retention_check_ms)
        return min(deadlines) if deadlines else None

    def poll(self, now_ms: int) -> CoordinatorResult:
        outcome = Outcome()
        for group in list(self.groups.values()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                outcome = merge(outcome, group.poll(now_ms))
        if self.next_retention_check_ms is not None and self.next_retention_check_ms <= now_ms:
            self.next_retention_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            outcome.records += self._expire_offsets(now_ms)
        self._forget_unrecorded_groups()
        return CoordinatorResult(outcome.records, None, outcome.completions)

    def _expire_offsets(self, now_ms: int) -> list[CoordinatorRecord]:
        """Tombstones for offsets past retention of groups without members (Kafka's cleanupGroupMetadata),
        and for the group itself once none of its offsets remain."""
        records = []
        for group_id in sorted(set(self.offsets.committed) | set(self.groups)):
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
        self.next_retention_check_ms = now_ms + self.config.offsets_retention_check_interval_ms

    def parked_request_ids(self) -> list[int]:
        return [request_id for group in self.groups.values() for request_id in group.parked_request_ids()]

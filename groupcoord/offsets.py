"""Committed offsets (Kafka's OffsetMetadataManager), sans-IO: OffsetCommit, OffsetFetch, OffsetDelete,
transactional offsets and retention.

Theory of operation. Durable state is `committed[group][(topic, partition)] -> OffsetCommitValue`, changed only
by `replay` of OffsetCommit records (a tombstone deletes). A record written by a transactional producer
(TxnOffsetCommit, KIP-98) stays in `pending[producer_id]` until a COMMIT marker for that producer is
replayed (then it becomes committed) or an ABORT (then it is dropped); OffsetFetch with `require_stable`
answers UNSTABLE_OFFSET_COMMIT for a partition with such a pending offset. Whether a commit is allowed is the
group's rule (`validate_offset_commit`: generation, member, rebalance state); the offset itself is taken as
given, as Kafka does (a consumer may rewind). Offsets of a group that stays empty expire after
`offsets_retention_ms` from their commit (tombstones written by the shard's timer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.shard import CoordinatorRecord
from groupcoord.config import GroupConfig
from groupcoord.records import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value
from net.protocol import messages
from partitions.errors import ErrorCode

TopicPartition = tuple[str, int]


@dataclass
class OffsetStore:
    config: GroupConfig
    committed: dict[str, dict[TopicPartition, OffsetCommitValue]] = field(default_factory=dict)
    # producer id -> (group, topic, partition) -> offset, until the transaction's marker
    pending: dict[int, dict[tuple[str, str, int], OffsetCommitValue | None]] = field(default_factory=dict)

    # --- replay -------------------------------------------------------------------------------------------

    # Test-only planted bug for the transactions simulation: transactional offsets count as committed at once
    # (before their transaction's marker), so an aborted transaction still moves the group's offsets.
    bug_txn_offsets_visible_early: bool = False

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None, producer_id: int) -> None:
        if producer_id >= 0 and not self.bug_txn_offsets_visible_early:
            self.pending.setdefault(producer_id, {})[(key.group, key.topic, key.partition)] = value
            return
        self._apply(key.group, (key.topic, key.partition), value)

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        staged = self.pending.pop(producer_id, {})
        if commit:
            for (group, topic, partition), value in staged.items():
                self._apply(group, (topic, partition), value)

    def _apply(self, group: str, key: TopicPartition, value: OffsetCommitValue | None) -> None:
        offsets = self.committed.setdefault(group, {})
        if value is None:
            offsets.pop(key, None)
            if not offsets:
                del self.committed[group]
        else:
            offsets[key] = value

    # --- requests -----------------------------------------------------------------------------------------

    def commit(self, request: Any, group_error: ErrorCode, now_ms: int,
               topic_ids: dict[str, Any] | None = None) -> tuple[list[CoordinatorRecord], Any]:
        """Records and the OffsetCommitResponse for one OffsetCommit (or TxnOffsetCommit) request."""
        records, topics = [], []
        for topic in request.topics:
            partitions = []
            for partition in topic.partitions:
                code = group_error
                metadata = partition.committed_metadata or ""
                if code == ErrorCode.NONE and len(metadata.encode()) > self.config.offset_metadata_bytes_max:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                if code == ErrorCode.NONE:
                    value = OffsetCommitValue(partition.committed_offset,
                                              getattr(partition, "committed_leader_epoch", -1), metadata, now_ms)
                    records.append(CoordinatorRecord(
                        encode_key(OffsetCommitKey(request.group_id, topic.name, partition.partition_index)),
                        encode_offset_commit_value(value)))
                partitions.append((partition.partition_index, code))
            topics.append((topic.name, partitions))
        return records, topics

    def fetch(self, group: str, topics: list[tuple[str, list[int]]] | None, require_stable: bool) -> list:
        """[(topic, [(partition, offset, leader_epoch, metadata, error)])] for the requested partitions, or
        for every committed partition when `topics` is None."""
        offsets = self.committed.get(group, {})
        unstable = self._unstable(group) if require_stable else set()
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            topics = list(by_topic.items())
        answer = []
        for topic, partitions in topics:
            rows = []
            for partition in partitions:
                if (topic, partition) in unstable:
                    rows.append((partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
                    continue
                value = offsets.get((topic, partition))
                if value is None:
                    rows.append((partition, -1, -1, "", ErrorCode.NONE))
                else:
                    rows.append((partition, value.offset, value.leader_epoch, value.metadata, ErrorCode.NONE))
            answer.append((topic, rows))
        return answer

    def _unstable(self, group: str) -> set[TopicPartition]:
        return {(topic, partition) for staged in self.pending.values() for (g, topic, partition) in staged if g == group}

    def tombstones(self, group: str, keys: list[TopicPartition] | None = None) -> list[CoordinatorRecord]:
        offsets = self.committed.get(group, {})
        chosen = sorted(offsets) if keys is None else [k for k in keys if k in offsets]
        return [CoordinatorRecord(encode_key(OffsetCommitKey(group, topic, partition)), None)
                for topic, partition in chosen]

    def expired(self, group: str, now_ms: int) -> list[TopicPartition]:
        retention = self.config.offsets_retention_ms
        return sorted(key for key, value in self.committed.get(group, {}).items()
                      if value.commit_timestamp + retention <= now_ms)

    def has_group(self, group: str) -> bool:
        return group in self.committed or any(g == group for staged in self.pending.values() for g, _, _ in staged)


def offset_commit_response(topics: list) -> Any:
    response_class = messages.OffsetCommitResponse
    return response_class(throttle_time_ms=0, topics=[
        response_class.OffsetCommitResponseTopic(name=name, partitions=[
            response_class.OffsetCommitResponsePartition(partition_index=p, error_code=code) for p, code in partitions])
        for name, partitions in topics])


def txn_offset_commit_response(topics: list) -> Any:
    response_class = messages.TxnOffsetCommitResponse
    return response_class(throttle_time_ms=0, topics=[
        response_class.TxnOffsetCommitResponseTopic(name=name, partitions=[
            response_class.TxnOffsetCommitResponsePartition(partition_index=p, error_code=code)
            for p, code in partitions])
        for name, partitions in topics])


def txn_offset_commit_error(request: Any, code: ErrorCode) -> Any:
    return txn_offset_commit_response([(t.name, [(p.partition_index, code) for p in t.partitions])
                                       for t in request.topics])


def offset_commit_error(request: Any, code: ErrorCode) -> Any:
    return offset_commit_response([(t.name, [(p.partition_index, code) for p in t.partitions])
                                   for t in request.topics])


def offset_fetch_response(answer: list, error: ErrorCode = ErrorCode.NONE) -> Any:
    response_class = messages.OffsetFetchResponse
    return response_class(throttle_time_ms=0, error_code=error, topics=[
        response_class.OffsetFetchResponseTopic(name=topic, partitions=[
            response_class.OffsetFetchResponsePartition(partition_index=p, committed_offset=offset,
                                                        committed_leader_epoch=epoch, metadata=metadata, error_code=code)
            for p, offset, epoch, metadata, code in rows])
        for topic, rows in answer])

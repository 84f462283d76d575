"""The controller's topic requests (the topic half of Kafka's ReplicationControlManager): CreateTopics (with
replica placement or a manual assignment, and the new topic's validated configs), DeleteTopics,
CreatePartitions, and the replica-list checks that reassignment shares.

Functions of a `Pending` (metadata/pending.py): each decides on records by emitting them to the pending
delta, so a later topic of the same request sees the earlier ones, and returns the response. Ids and
placement start points come from the controller's seeded digest (`digest(*parts) -> 16 bytes`), so every
controller that handles the same request at the same log position decides the same.
"""

from __future__ import annotations

from typing import Any, Callable

from metadata.config_control import topic_configs
from metadata.election import elect_leader
from metadata.naming import collision_key, validate_topic_name
from metadata.pending import Pending
from metadata.placement import assign_replicas
from metadata.records import ConfigRecord, ConfigResourceType, PartitionRecord, RemoveTopicRecord, TopicRecord
from metadata.requests import (
    ConfigEntry,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ReplicaAssignment,
)
from partitions.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

replication_factor_max = 32767  # Kafka's INT16 field
partitions_per_topic_max = 100_000
topics_per_request_max = 10_000

Digest = Callable[..., bytes]


def create_topics(pending: Pending, request: CreateTopicsRequest, settings: Any, digest: Digest) -> CreateTopicsResponse:
    """`settings` carries default_num_partitions and default_replication_factor (the ControllerConfig)."""
    names = [topic.name for topic in request.topics]
    results = []
    for topic in request.topics:
        try:
            if len(names) > topics_per_request_max:
                raise InvalidRequestError(f"More than {topics_per_request_max} topics in one request")
            if names.count(topic.name) > 1:
                raise InvalidRequestError(f"Duplicate topic name {topic.name!r} in the request")
            results.append(_create_topic(pending, topic, request.validate_only, settings, digest))
        except KafkaError as error:
            results.append(CreatableTopicResult(topic.name, error.code, error.message))
    return CreateTopicsResponse(tuple(results))


def _create_topic(pending: Pending, topic: CreatableTopic, validate_only: bool, settings: Any,
                  digest: Digest) -> CreatableTopicResult:
    validate_topic_name(topic.name)
    _check_topic_name_free(pending, topic.name)
    if topic.assignments is not None:
        assignments = _manual_assignments(pending, topic)
    else:
        assignments = _placed_assignments(pending, topic, settings, digest)
    replication_factor = min(len(replicas) for replicas in assignments)
    configs = topic_configs(topic.configs, replication_factor)
    topic_id = _new_topic_id(pending, topic.name, digest)
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


def _check_topic_name_free(pending: Pending, name: str) -> None:
    if pending.delta.topic_id(name) is not None:
        raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
    key = collision_key(name)
    taken = list(pending.image.topics.by_name) + [r.name for r in pending.records if isinstance(r, TopicRecord)]
    for other in taken:
        if collision_key(other) == key and pending.delta.topic_id(other) is not None:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")


def _placed_assignments(pending: Pending, topic: CreatableTopic, settings: Any, digest: Digest) -> list[tuple[int, ...]]:
    num_partitions = topic.num_partitions
    if num_partitions == -1:
        num_partitions = settings.default_num_partitions
    replication_factor = topic.replication_factor
    if replication_factor == -1:
        replication_factor = settings.default_replication_factor
    if not 1 <= num_partitions <= partitions_per_topic_max:
        raise InvalidPartitionsError(
            f"Number of partitions was set to an invalid value {num_partitions} "
            f"(must be 1..{partitions_per_topic_max})"
        )
    return _place(pending, topic.name, 0, num_partitions, replication_factor, digest)


def _place(pending: Pending, name: str, first_partition: int, count: int, replication_factor: int,
           digest: Digest) -> list[tuple[int, ...]]:
    brokers = {b: pending.delta.broker(b).rack for b in _active_brokers(pending)}
    if not 1 <= replication_factor <= replication_factor_max:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
            f"of {replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered."
        )
    placement = digest(b"placement", name.encode())
    start_index = int.from_bytes(placement[:8], "big") % len(brokers)
    replica_shift = int.from_bytes(placement[8:], "big") % len(brokers)
    return assign_replicas(brokers, count, replication_factor, start_index, replica_shift, first_partition)


def _active_brokers(pending: Pending) -> list[int]:
    return [b for b in pending.image.cluster.brokers if pending.is_active(b)]


def _manual_assignments(pending: Pending, topic: CreatableTopic) -> list[tuple[int, ...]]:
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
    return [_checked_replicas(pending, a) for a in assignments]


def _checked_replicas(pending: Pending, assignment: ReplicaAssignment) -> tuple[int, ...]:
    replicas = registered_replicas(pending, assignment)
    if not any(pending.is_active(b) for b in replicas):
        raise KafkaError(
            f"All brokers specified in the manual partition assignment for partition {assignment.partition} "
            "are fenced or in controlled shutdown.",
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        )
    return replicas


def registered_replicas(pending: Pending, assignment: ReplicaAssignment) -> tuple[int, ...]:
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


def _new_topic_id(pending: Pending, name: str, digest: Digest) -> bytes:
    """A 16-byte id derived from the seed, the log position and the name: unique, never all zero."""
    for attempt in range(1_000):
        topic_id = digest(b"topic_id", name.encode(), attempt.to_bytes(4, "big"))
        if any(topic_id) and pending.delta.topic_name(topic_id) is None:
            return topic_id
    raise AssertionError(f"no free topic id for {name!r} after 1000 attempts")


def delete_topics(pending: Pending, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    results = []
    expected_ids = request.topic_ids or (b"",) * len(request.names)
    if len(expected_ids) != len(request.names):
        message = f"{len(expected_ids)} topic ids for {len(request.names)} topic names"
        return DeleteTopicsResponse(tuple(DeletableTopicResult(name, ErrorCode.INVALID_REQUEST, message)
                                          for name in request.names))
    for name, expected_id in zip(request.names, expected_ids):
        topic_id = pending.delta.topic_id(name)
        if request.names.count(name) > 1:
            results.append(DeletableTopicResult(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name"))
        elif expected_id and topic_id != expected_id:
            code = ErrorCode.UNKNOWN_TOPIC_ID
            results.append(DeletableTopicResult(name, code, "This server does not host this topic ID."))
        elif topic_id is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append(DeletableTopicResult(name, code, "This server does not host this topic."))
        else:
            pending.emit(RemoveTopicRecord(topic_id))
            topic = pending.image.topics.by_id.get(topic_id)
            results.append(DeletableTopicResult(name, ErrorCode.NONE, "", topic_id,
                                                num_partitions=0 if topic is None else len(topic.partitions)))
    return DeleteTopicsResponse(tuple(results))


def create_partitions(pending: Pending, request: CreatePartitionsRequest, digest: Digest) -> int:
    """Emit the new partitions of `request`; how many. Raises KafkaError."""
    topic = pending.image.topics.by_name.get(request.topic)
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
        assignments = _place(pending, topic.name, current, count, replication_factor, digest)
    else:
        assignments = _new_partition_assignments(pending, request, current, replication_factor)
    for offset, replicas in enumerate(assignments):
        pending.emit(_new_partition_record(pending, topic.topic_id, current + offset, replicas))
    return count


def _new_partition_assignments(pending: Pending, request: CreatePartitionsRequest, current: int,
                               replication_factor: int) -> list[tuple[int, ...]]:
    if len(request.assignments) != request.new_total_count - current:
        raise KafkaError(
            f"Increasing the number of partitions by {request.new_total_count - current} but "
            f"{len(request.assignments)} assignments provided.",
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        )
    assignments = []
    for offset, assignment in enumerate(request.assignments):
        replicas = _checked_replicas(pending, ReplicaAssignment(current + offset, assignment.broker_ids))
        if len(replicas) != replication_factor:
            raise KafkaError(
                f"Inconsistent replication factor: the topic has {replication_factor}, partition "
                f"{current + offset} would have {len(replicas)}",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        assignments.append(replicas)
    return assignments


def _new_partition_record(pending: Pending, topic_id: bytes, partition: int, replicas: tuple[int, ...]) -> PartitionRecord:
    """A new partition: the ISR is its active replicas, the leader the first of them (in replica order)."""
    isr = tuple(b for b in replicas if pending.is_active(b))
    assert isr, f"partition {partition}: no active replica in {replicas}"
    leader, isr = elect_leader(replicas, isr, pending.is_active, unclean_allowed=False)
    return PartitionRecord(topic_id, partition, replicas, isr, leader, leader_epoch=0, partition_epoch=0)

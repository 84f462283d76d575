"""The KIP-848 consumer-group records of `__consumer_offsets`, in Kafka's own schemas
(group-coordinator/src/main/resources/common/message/ConsumerGroup*.json).

Keys are not flexible: an int16 key version naming the record type, then the group id (and member id):

    ConsumerGroupMetadataKey                  (3)  group                 -> value: Epoch
    ConsumerGroupPartitionMetadataKey         (4)  group                 -> the subscribed topics' partition counts
    ConsumerGroupMemberMetadataKey            (5)  group, member         -> the member's subscription
    ConsumerGroupTargetAssignmentMetadataKey  (6)  group                 -> value: AssignmentEpoch
    ConsumerGroupTargetAssignmentMemberKey    (7)  group, member         -> the member's target partitions
    ConsumerGroupCurrentMemberAssignmentKey   (8)  group, member         -> epoch, state, assigned, revoking

Values are flexible (compact strings and arrays, tagged fields), an int16 value version (0) first; they are
built here from specs in the codec's notation, so the same codec that speaks the wire writes them.
Partition metadata (key 4) is the subscribed topics' ids, names and partition counts that the target assignment
was computed for, as Kafka 3.9 writes it: a heartbeat bumps the group epoch when the metadata image disagrees with
it. Persisting it keeps a coordinator failover from bumping the epoch of every group it loads (which made every
member's commit in flight fail with STALE_MEMBER_EPOCH). A log written before it was persisted has none, and the
first heartbeat after a load writes it, with one epoch bump.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from groupcoord.records import register_key_type
from net.protocol.schema import MessageSpec, Versions, build_message_class, field
from net.protocol.types import Reader, write_string

_INT16 = struct.Struct(">h")
VALUE_VERSION = 0


def _data(name: str, *fields_) -> type:
    spec = MessageSpec(-1, name, "data", Versions.parse("0"), Versions.parse("0+"), tuple(fields_))
    return build_message_class(spec)


def _topic_partitions(kafka_name: str) -> Any:
    return field(kafka_name, '[]TopicPartitions', '0+', fields=(
        field('TopicId', 'uuid', '0+'),
        field('Partitions', '[]int32', '0+'),
    ))


ConsumerGroupMetadataValue = _data('ConsumerGroupMetadataValue', field('Epoch', 'int32', '0+'))
ConsumerGroupPartitionMetadataValue = _data(
    'ConsumerGroupPartitionMetadataValue',
    field('Topics', '[]TopicMetadata', '0+', fields=(
        field('TopicId', 'uuid', '0+'),
        field('TopicName', 'string', '0+'),
        field('NumPartitions', 'int32', '0+'),
        # The partitions' racks: empty, as Kafka writes it when it has no rack information to use (and Kafka
        # 4.0 no longer reads it).
        field('PartitionMetadata', '[]PartitionMetadata', '0+', fields=(
            field('Partition', 'int32', '0+'),
            field('Racks', '[]string', '0+'),
        )),
    )),
)
ConsumerGroupMemberMetadataValue = _data(
    'ConsumerGroupMemberMetadataValue',
    field('InstanceId', 'string', '0+', nullable='0+', default=None),
    field('RackId', 'string', '0+', nullable='0+', default=None),
    field('ClientId', 'string', '0+', default=''),
    field('ClientHost', 'string', '0+', default=''),
    field('SubscribedTopicNames', '[]string', '0+'),
    field('SubscribedTopicRegex', 'string', '0+', nullable='0+', default=None),
    field('RebalanceTimeoutMs', 'int32', '0+', default=-1),
    field('ServerAssignor', 'string', '0+', nullable='0+', default=None),
    # A classic member of the consumer group (KIP-848's online migration): its session and its JoinGroup protocols
    field('ClassicMemberMetadata', 'ClassicMemberMetadata', '0+', nullable='0+', tagged='0+', tag=0, default=None,
          fields=(
              field('SessionTimeoutMs', 'int32', '0+'),
              field('SupportedProtocols', '[]ClassicProtocol', '0+', fields=(
                  field('Name', 'string', '0+'),
                  field('Metadata', 'bytes', '0+'),
              )),
          )),
)
ConsumerGroupTargetAssignmentMetadataValue = _data('ConsumerGroupTargetAssignmentMetadataValue',
                                                   field('AssignmentEpoch', 'int32', '0+'))
ConsumerGroupTargetAssignmentMemberValue = _data('ConsumerGroupTargetAssignmentMemberValue',
                                                 _topic_partitions('TopicPartitions'))
ConsumerGroupCurrentMemberAssignmentValue = _data(
    'ConsumerGroupCurrentMemberAssignmentValue',
    field('MemberEpoch', 'int32', '0+'),
    field('PreviousMemberEpoch', 'int32', '0+'),
    field('State', 'int8', '0+'),
    _topic_partitions('AssignedPartitions'),
    _topic_partitions('PartitionsPendingRevocation'),
)


@dataclass(frozen=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


_KEY_VERSIONS: dict[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
}
_VALUE_CLASSES: dict[int, type | None] = {
    3: ConsumerGroupMetadataValue,
    4: ConsumerGroupPartitionMetadataValue,
    5: ConsumerGroupMemberMetadataValue,
    6: ConsumerGroupTargetAssignmentMetadataValue,
    7: ConsumerGroupTargetAssignmentMemberValue,
    8: ConsumerGroupCurrentMemberAssignmentValue,
}


def encode_consumer_key(key: Any) -> bytes:
    out: list = [_INT16.pack(_KEY_VERSIONS[type(key)])]
    write_string(key.group, False, False, out)
    if hasattr(key, "member_id"):
        write_string(key.member_id, False, False, out)
    return b"".join(out)


def encode_consumer_value(value: Any) -> bytes:
    return _INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


@dataclass(frozen=True)
class SkippedValue:
    """A value this coordinator reads past (a newer value version)."""

    version: int


def _register() -> None:
    by_version = {version: cls for cls, version in _KEY_VERSIONS.items()}
    for version, key_class in by_version.items():
        with_member = "member_id" in key_class.__dataclass_fields__
        value_class = _VALUE_CLASSES[version]

        def decode_key(reader: Reader, _version: int, key_class=key_class, with_member=with_member) -> Any:
            group = reader.string()
            return key_class(group, reader.string()) if with_member else key_class(group)

        def decode_value(reader: Reader, value_class=value_class) -> Any:
            value_version = reader.int16()
            if value_class is None or value_version != VALUE_VERSION:
                return SkippedValue(value_version)
            return value_class.decode(reader.buf[reader.pos:reader.end], VALUE_VERSION)

        register_key_type((version,), decode_key, decode_value)


def topic_partitions(struct_class: type, assignment: dict[uuid.UUID, frozenset[int]]) -> list:
    """An assignment as the TopicPartitions structs of a record or response, topics and partitions sorted."""
    return [struct_class(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(assignment.items()) if partitions]


def assignment_of(items: list | None) -> dict[uuid.UUID, frozenset[int]]:
    """TopicPartitions structs as an assignment (topic id -> partitions)."""
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for item in items or ():
        partitions = assignment.get(item.topic_id, frozenset()) | frozenset(item.partitions)
        if partitions:
            assignment[item.topic_id] = partitions
    return assignment


_register()
